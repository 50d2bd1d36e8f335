"""The cores left to a benchmark by everything else on the machine (bench/predict.sh).

predict_load.py PID: until process PID exits, every 0.1 s reads the machine's busy CPU
time (/proc/stat) and the CPU time of PID's scheduling group (its Linux autogroup, one
per session: PID, its children and this sampler; /proc/*/stat utime + stime). Prints
the machine's cores less the cores the other groups used on average over the run: the
capacity `starling-sim predict --cores` takes. The benchmark must keep its processes
busy for the figure to mean what others left it (a federation training is).
"""
import os
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def busy_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait.
    return sum(v) - v[3] - v[4]


def group(pid):
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


def group_ticks(ours, seen, others):
    """Updates seen[pid] with the CPU ticks of every process in group `ours`; others
    holds the processes already known to be outside it."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in others:
            continue
        if pid not in seen and group(pid) != ours:
            others.add(pid)
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        seen[pid] = int(fields[11]) + int(fields[12])  # utime, stime


def main():
    watched = int(sys.argv[1])
    cores = os.cpu_count() or 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    ours = group(watched)
    seen, others_seen = {}, set()
    group_ticks(ours, seen, others_seen)
    start_ours = sum(seen.values())
    start_busy, t0 = busy_ticks(), time.monotonic()
    end_busy, end_t = start_busy, t0
    while os.path.exists(f"/proc/{watched}"):
        group_ticks(ours, seen, others_seen)
        end_busy, end_t = busy_ticks(), time.monotonic()
        time.sleep(0.1)
    wall = max(end_t - t0, 1e-3)
    others = max(0, (end_busy - start_busy) - (sum(seen.values()) - start_ours)) / TICKS / wall
    print(f"{max(0.05, cores - others):.2f}")


if __name__ == "__main__":
    main()
