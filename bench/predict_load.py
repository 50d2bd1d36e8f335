"""Other busy process groups while a benchmark runs (bench/predict.sh).

predict_load.py PID: until process PID exits, every 0.1 s finds the processes in
state R (running or runnable) from /proc/*/stat and counts the distinct scheduling
groups (Linux autogroups, one per session: /proc/PID/autogroup) they belong to, PID's
own group (the benchmark, its children and this sampler) left out; prints the mean:
the background load that `starling-sim predict --background-load` takes. With
autogroups off (/proc/sys/kernel/sched_autogroup_enabled = 0) every process is its
own group.
"""
import os
import sys
import time


def group(pid, autogroups):
    if not autogroups:
        return pid
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return pid


def runnable():
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        # pid (comm) state ...: comm may hold spaces and parentheses.
        if text[text.rfind(")") + 2:].split()[0] == "R":
            yield int(name)


def main():
    watched = int(sys.argv[1])
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            autogroups = f.read().strip() == "1"
    except OSError:
        autogroups = False
    ours = group(watched, autogroups)
    me = os.getpid()
    total = samples = 0
    while os.path.exists(f"/proc/{watched}"):
        groups = {group(pid, autogroups) for pid in runnable() if pid not in (watched, me)}
        groups.discard(ours)
        total += len(groups)
        samples += 1
        time.sleep(0.1)
    print(f"{total / samples:.2f}" if samples else "0")


main()
