"""CPU time of a federation's processes and of the coordinator's threads (docs/predict.md).

federation_cpu.py PID OUT: until process PID exits, every 0.1 s reads the CPU time
(/proc/*/stat utime + stime) of every process in PID's scheduling group (its Linux
autogroup: PID and its children, as bench/predict_load.py counts them) and of each
thread of the starling-coordinator processes among them, then writes to OUT the wall
time, the CPU seconds per command name and the CPU seconds per coordinator thread. A
process's last sample before it exits is what counts (up to 0.1 s of its CPU is missed).

    bench-federation --only full-iid --clients 30 --mode async ... &
    python3 bench/federation_cpu.py $! cpu.txt
"""
import collections
import os
import sys
import time

from predict_load import group  # the scheduler group of a process (bench/predict_load.py)

TICKS = os.sysconf("SC_CLK_TCK")


def cpu(path):
    """(command, CPU ticks) of a /proc/.../stat file, or None when it is gone."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return text[text.find("(") + 1:text.rfind(")")], int(fields[11]) + int(fields[12])


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: federation_cpu.py PID OUT")
    watched, out = int(sys.argv[1]), sys.argv[2]
    ours = group(watched)
    processes, threads, others = {}, {}, set()
    t0 = time.monotonic()
    t1 = t0
    while os.path.exists(f"/proc/{watched}"):
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in others:
                continue
            pid = int(name)
            if pid not in processes and group(pid) != ours:
                others.add(pid)
                continue
            s = cpu(f"/proc/{pid}/stat")
            if not s:
                continue
            processes[pid] = s
            if s[0].startswith("starling-coord"):
                try:
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        t = cpu(f"/proc/{pid}/task/{tid}/stat")
                        if t:
                            threads[(pid, int(tid))] = t
                except OSError:
                    pass
        t1 = time.monotonic()
        time.sleep(0.1)
    by_command = collections.defaultdict(lambda: [0, 0])
    for command, ticks in processes.values():
        by_command[command][0] += ticks
        by_command[command][1] += 1
    with open(out, "w") as f:
        f.write(f"wall_s {t1 - t0:.2f}\n")
        for command, (ticks, n) in sorted(by_command.items(), key=lambda kv: -kv[1][0]):
            f.write(f"process {command} cpu_s {ticks / TICKS:.2f} processes {n}\n")
        for (pid, tid), (command, ticks) in sorted(threads.items()):
            f.write(f"thread {pid}/{tid} {'main' if pid == tid else 'other'} cpu_s {ticks / TICKS:.2f}\n")


main()
