"""Others' runnable processes while a benchmark runs (bench/predict.sh).

predict_load.py PID: until process PID exits, every 0.1 s counts the processes in
state R (running or runnable) that are neither PID, its children nor this sampler,
from /proc/*/stat, and prints their mean: the background load that
`starling-sim predict --background-load` takes.
"""
import os
import sys
import time


def states():
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        rest = text[text.rfind(")") + 2:].split()
        yield int(name), rest[0], int(rest[1])


def main():
    watched = int(sys.argv[1])
    me = os.getpid()
    total = samples = 0
    while os.path.exists(f"/proc/{watched}"):
        others = 0
        for pid, state, ppid in states():
            if state == "R" and pid not in (watched, me) and ppid != watched:
                others += 1
        total += others
        samples += 1
        time.sleep(0.1)
    print(f"{total / samples:.2f}" if samples else "0")


main()
