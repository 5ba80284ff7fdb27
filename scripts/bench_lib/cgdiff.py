#!/usr/bin/env python3
"""Instructions per byte (or per operation) from two callgrind profiles of cf-access-tcp.

    python3 scripts/bench_lib/cgdiff.py BASELINE RUN UNITS [--top N] [--calls NAME,NAME...]

BASELINE is a profile of a client that only started (and dialled once); RUN is one that also
carried the load; UNITS is the bytes carried (or round trips, or connections). The difference is
the cost of the load alone: self cost per unit of the top functions, and calls per MiB (per unit
when UNITS is small) of the functions named with --calls. How to make the profiles:
reference/perf.md ("Profiling").
"""

import argparse
import collections
import re


def parse(path):
    """(self cost, call counts, inclusive cost of calls) per function name."""
    names = {}
    self_cost, calls, call_cost = collections.Counter(), collections.Counter(), collections.Counter()
    fn = cfn = None
    pending = None

    def name(text):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", text)
        if not m:
            return text
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), text)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                fn = name(line[3:])
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) < 2:
                    continue
                cost = int(parts[1])
                if pending is not None:
                    calls[cfn] += pending
                    call_cost[cfn] += cost
                    pending = None
                else:
                    self_cost[fn] += cost
    return self_cost, calls, call_cost


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline")
    p.add_argument("run")
    p.add_argument("units", type=float)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--calls", default="epoll_wait,SSL_read,SSL_write,"
                                      "read,recv,send,write,malloc,__memcpy_avx_unaligned_erms")
    a = p.parse_args()
    base, run = parse(a.baseline), parse(a.run)
    total = sum(run[0].values()) - sum(base[0].values())
    print("load: %.1f M instructions = %.2f per unit" % (total / 1e6, total / a.units))
    diff = collections.Counter({k: v - base[0].get(k, 0) for k, v in run[0].items()})
    print("\nself cost per unit   share  function")
    for k, v in diff.most_common(a.top):
        print("%14.2f  %6.1f%%  %s" % (v / a.units, 100.0 * v / total if total else 0, k[:100]))
    per = "MiB" if a.units >= 1 << 20 else "unit"
    scale = a.units / (1 << 20) if per == "MiB" else a.units
    wanted = [w for w in a.calls.split(",") if w]
    print("\ncalls per %s   inclusive per unit  function" % per)
    rows = []
    for k, v in run[1].items():
        if any(k == w or k.startswith(w + " ") or k.startswith("$") and w in k for w in wanted):
            d = v - base[1].get(k, 0)
            if d > 0:
                rows.append((d, k, run[2][k] - base[2].get(k, 0)))
    for d, k, c in sorted(rows, reverse=True):
        print("%14.1f  %18.2f  %s" % (d / scale, c / a.units, k[:100]))


if __name__ == "__main__":
    main()
