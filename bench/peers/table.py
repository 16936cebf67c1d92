#!/usr/bin/env python3
"""Prints the table of scripts/bench-compare from its results file (one JSON object a line).

µs/trigger and µs/run are CPU microseconds (every process of the system, database or broker
included) per trigger fired (Cadenza: published, counting its admin, broker and PostgreSQL only)
and per run finished end to end (everything, workers included). The last three columns are
Cadenza's figure divided by the peer's, at the same N: fired (or published) per second,
end-to-end runs per second, and CPU per finished run (below 1: Cadenza spends less).
"""
import json
import sys


def num(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)


def ratio(a, b):
    if a is None or not b:
        return "n/a"
    return f"{a / b:.2f}x"


def main(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    cadenza = {r["jobs"]: r for r in rows if r["system"] == "cadenza" and "not_run" not in r}
    head = ["system", "N", "due/s", "fired/s", "misfired", "late p50 ms", "p99", "max",
            "e2e runs/s", "CPU s", "µs/trigger", "µs/run", "cadenza fired/s x", "e2e x",
            "µs/run x"]
    table = [head]
    for r in sorted(rows, key=lambda r: (r["jobs"], r["system"] != "cadenza", r["system"])):
        if "not_run" in r:
            table.append([r["system"], str(r["jobs"]), "not run: " + r["not_run"]])
            continue
        late = r.get("lateness_ms") or {}
        c = cadenza.get(r["jobs"])
        if r["system"] == "cadenza":
            fired_x = e2e_x = cost_x = "-"
        else:
            fired_x = ratio(c and c.get("fired_per_s"), r.get("fired_per_s"))
            e2e_x = ratio(c and c.get("e2e_runs_per_s"), r.get("e2e_runs_per_s"))
            cost_x = ratio(c and c.get("cpu_us_per_run"), r.get("cpu_us_per_run"))
        table.append([
            r["system"], str(r["jobs"]), num(r.get("due_per_s")), num(r.get("fired_per_s")),
            num(r.get("misfired")), num(late.get("p50")), num(late.get("p99")), num(late.get("max")),
            num(r.get("e2e_runs_per_s")), num((r.get("cpu_s") or {}).get("total"), "{:.1f}"),
            num(r.get("cpu_us_per_trigger")), num(r.get("cpu_us_per_run")),
            fired_x, e2e_x, cost_x,
        ])
    widths = [max(len(row[i]) for row in table if len(row) > i and len(row) == len(head))
              for i in range(len(head))]
    for row in table:
        if len(row) == len(head):
            print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
        else:
            print("  ".join([row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2]]))
    secs = {r["secs"] for r in rows}
    print(f"(window {', '.join(map(str, sorted(secs)))} s; CPU s = CPU seconds of all the system's "
          "processes in the window, database or Redis included; µs/trigger and µs/run = CPU µs per "
          "trigger fired and per run finished; see bench/peers/README.md)")


if __name__ == "__main__":
    main(sys.argv[1])
