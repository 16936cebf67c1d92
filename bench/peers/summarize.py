#!/usr/bin/env python3
"""Turns the runs a harness recorded into the common JSON line.

    summarize.py --system NAME --jobs N --secs S --from W0_MS --to W1_MS --cpu CPU.json \
                 [--no-e2e] RECORDS...

Each RECORDS file has one line per run: `JOB DUE_MS FIRED_MS END_MS` (END_MS `-` if the run did
not finish). Over the window [W0, W1):
  fired_per_s     runs that fired (started) in the window / S;
  lateness_ms     FIRED - DUE of those runs (p50, p99, max);
  misfired        due slots in the window that the scheduler skipped: a job's slot (every job
                  is due once per second, so the window holds N*S slots) that did not fire
                  although a later slot of the same job did. Slots after a job's last fired
                  one were still waiting when the load stopped: they are reported apart
                  (stderr), not as misfired;
  e2e_runs_per_s  runs that finished in the window / S (null with --no-e2e);
  cpu_us_per_trigger, cpu_us_per_run
                  CPU µs of all the system's processes in the window per run fired and per
                  run finished in it (a peer's scheduler also runs its jobs, so the same CPU is
                  divided by both counts).
Prints a short account to stderr and the JSON object as the last stdout line.
"""
import json
import sys


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    return float(sorted_values[round((len(sorted_values) - 1) * p)])


def per_unit(cpu, count):
    """CPU µs of the window per unit of work, or None when no work was done."""
    total = cpu.get("total")
    if total is None or not count:
        return None
    return round(total * 1e6 / count, 1)


def main(argv):
    opts, files, it = {"--no-e2e": False}, [], iter(argv)
    for a in it:
        if a == "--no-e2e":
            opts[a] = True
        elif a.startswith("--"):
            opts[a] = next(it)
        else:
            files.append(a)
    jobs, secs = int(opts["--jobs"]), int(opts["--secs"])
    w0, w1 = int(opts["--from"]), int(opts["--to"])

    total = fired = finished = 0
    lateness, due_seen, duplicates, last_due = [], set(), 0, {}
    for path in files:
        with open(path) as f:
            for line in f:
                job, due, at, end = line.split()
                due, at = int(due), int(at)
                total += 1
                last_due[job] = max(due, last_due.get(job, due))
                if w0 <= at < w1:
                    fired += 1
                    lateness.append(at - due)
                if end != "-" and w0 <= int(end) < w1:
                    finished += 1
                if w0 <= due < w1:
                    key = (job, due)
                    if key in due_seen:
                        duplicates += 1
                    due_seen.add(key)
    lateness.sort()
    # Slots in the window up to each job's last fired one; the rest were still waiting.
    passed = 0
    for due in last_due.values():
        first_slot = w0 + (due - w0) % 1000
        if due >= first_slot:
            passed += min(secs, (due - first_slot) // 1000 + 1)
    skipped = passed - len(due_seen)
    waiting = jobs * secs - passed
    with open(opts["--cpu"]) as f:
        cpu = json.load(f)
    print(
        f"{opts['--system']}: {total} runs recorded in all; in the window {fired} fired, "
        f"{finished} finished; of the {jobs * secs} slots due in the window {len(due_seen)} ran, "
        f"{skipped} were skipped (misfired), {waiting} were still waiting at the stop"
        + (f"; {duplicates} slots ran twice" if duplicates else ""),
        file=sys.stderr,
    )
    result = {
        "system": opts["--system"],
        "jobs": jobs,
        "secs": secs,
        "due_per_s": float(jobs),
        "fired_per_s": round(fired / secs, 1),
        "misfired": skipped,
        "lateness_ms": {
            "p50": percentile(lateness, 0.5),
            "p99": percentile(lateness, 0.99),
            "max": float(lateness[-1]) if lateness else None,
        },
        "e2e_runs_per_s": None if opts["--no-e2e"] else round(finished / secs, 1),
        "cpu_s": cpu,
        "cpu_us_per_trigger": per_unit(cpu, fired),
        "cpu_us_per_run": None if opts["--no-e2e"] else per_unit(cpu, finished),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
