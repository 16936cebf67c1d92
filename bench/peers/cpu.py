#!/usr/bin/env python3
"""CPU seconds (user + system) used by groups of processes over a time window.

    cpu.py --from EPOCH_MS --to EPOCH_MS --out FILE PART=PID[,PID...] ...

Sleeps until --from, samples, sleeps until --to, samples again and writes
{"parts": {PART: seconds}, "total": seconds} to FILE: for each part, the difference between the
two samples of the CPU time of its processes and their live descendants. A process's sample is
utime + stime + cutime + cstime from /proc/PID/stat, so a child that exited between the two
samples still counts (its time moves into its parent's cutime/cstime once reaped).
"""
import json
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    """(ppid, cpu ticks) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    return int(fields[1]), sum(int(x) for x in fields[11:15])


def sample(roots):
    """Seconds of CPU of the roots and all their live descendants."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s is not None:
                procs[int(name)] = s
    children = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo, ticks = set(), list(roots), 0
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in procs:
            continue
        seen.add(pid)
        ticks += procs[pid][1]
        todo.extend(children.get(pid, []))
    return ticks / TICK


def sleep_until(ms):
    left = ms / 1000.0 - time.time()
    if left > 0:
        time.sleep(left)


def main(argv):
    args, parts = {}, {}
    it = iter(argv)
    for a in it:
        if a in ("--from", "--to", "--out"):
            args[a] = next(it)
        else:
            name, _, pids = a.partition("=")
            parts[name] = [int(p) for p in pids.split(",") if p]
    sleep_until(int(args["--from"]))
    before = {name: sample(pids) for name, pids in parts.items()}
    sleep_until(int(args["--to"]))
    after = {name: sample(pids) for name, pids in parts.items()}
    used = {name: round(after[name] - before[name], 2) for name in parts}
    with open(args["--out"], "w") as f:
        json.dump({"total": round(sum(used.values()), 2), "parts": used}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
