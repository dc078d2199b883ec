#!/usr/bin/env python3
"""Compares two CPU profiles of ftrain's kernels (calibrate/host/cpu-ftrain.json,
`make cpu-profile`), value by value, and names every number that moved by more
than a factor (default 1.25) between them: a rate measured while the machine was
busy (a worker thread waiting for a CPU makes one dispatch of the pool cost
microseconds instead of tens of nanoseconds) shows here before records are
compared with it.

    python3 calibrate/host/profile_diff.py OLD NEW [--factor F]

Prints one line per moved number, then a count; exit 0 (nothing moved), 1
(something moved), 2 (bad input)."""
import argparse
import json
import sys


def numbers(x, path=""):
    """(path, value) of every number in a JSON value, in order."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from numbers(v, path + "." + k if path else k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from numbers(v, "%s[%d]" % (path, i))
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, float(x)


def moved(old, new, factor):
    """(path, old, new) of the numbers whose ratio is beyond `factor` either
    way, and of those present in one profile only (the other None)."""
    a, b = dict(numbers(old)), dict(numbers(new))
    out = []
    for p in list(a) + [p for p in b if p not in a]:
        x, y = a.get(p), b.get(p)
        if x is None or y is None:
            out.append((p, x, y))
        elif x == y:
            continue
        elif x <= 0 or y <= 0 or max(x / y, y / x) > factor:
            out.append((p, x, y))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--factor", type=float, default=1.25)
    a = ap.parse_args(argv)
    if not a.factor > 1:
        print("profile_diff: --factor must be above 1", file=sys.stderr)
        return 2
    try:
        old, new = [json.load(open(p)) for p in (a.old, a.new)]
    except (OSError, ValueError) as e:
        print("profile_diff: %s" % e, file=sys.stderr)
        return 2
    m = moved(old, new, a.factor)
    for p, x, y in m:
        r = "x%.2f" % (y / x) if x and y else "one side only"
        print("profile_diff: %s %s -> %s (%s)" % (p, x, y, r))
    print("profile_diff: %d numbers moved by more than x%.2f from %s to %s%s"
          % (len(m), a.factor, a.old, a.new, "" if not m else ": measured while the machine was busy?"))
    return 1 if m else 0


if __name__ == "__main__":
    sys.exit(main())
