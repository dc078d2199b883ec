#!/usr/bin/env python3
"""Leave one dataset out: for every record file with measured step times, fit
the profiles on all the other record files, then estimate that file's records
with those profiles, and tabulate its it/s errors beside the errors with the
committed profiles (fitted on everything). Standard library only; run from the
repository root after building ftest (`make lodo` does both and writes the
table into docs/validation.md):

    python3 calibrate/lodo.py build/ftest > build/lodo.md

A record file is a dataset (the shared data's importers write one file per
dataset). The profiles go to build/lodo/<file>/calibrate/profiles, read through
FTEST_DATA_DIR pointing at a folder whose models/ is the repository's. Records
ftest cannot express are left out by `ftest fit` and counted by `ftest check`;
runs marked as one-time warm-ups (notes) are not in the statistics.

A second table attributes each left-out error to the constants: for every
constant whose fit without the file differs from the committed profiles (or is
left at its built-in default), the file's errors again with only that constant
set to its committed value (build/lodo/<file>+<constant>).
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

LINE = re.compile(r"it/s (\S+) vs (\S+) \(([-+0-9.]+)%\)")


def timed(path):
    with open(path) as f:
        for line in f:
            if line.strip() and '"it_per_s"' in line:
                return True
    return False


def data_dir(root, name):
    """A data folder for one fit: the repository's models and host measurements, its own profiles."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "calibrate"), exist_ok=True)
    link = os.path.join(d, "models")
    if not os.path.islink(link):
        os.symlink(os.path.abspath("models"), link)
    # measured on a host, not fitted from records (the CPU device's kernel
    # rates): the same with or without any record file
    host = os.path.join(d, "calibrate", "host")
    if not os.path.islink(host):
        os.symlink(os.path.abspath("calibrate/host"), host)
    return d


def errors(ftest, path, env):
    """Signed it/s errors in percent by group: (source file, batch > 1)."""
    recs = [json.loads(l) for l in open(path) if l.strip()]
    out = subprocess.run([ftest, "check", path], capture_output=True, text=True, env=env).stdout
    lines = [l for l in out.splitlines() if l[:4] in ("ok  ", "FAIL", "n/a ")]
    if len(lines) != len(recs):
        sys.exit("lodo: %s: %d records, %d check lines" % (path, len(recs), len(lines)))
    groups = {}
    for rec, line in zip(recs, lines):
        m = LINE.search(line)
        if not m or "one-time warm-up" in rec.get("notes", ""):
            continue
        cfg = rec["config"]
        key = "%s%s" % (rec["source"].split("/")[-1], ", batch > 1" if cfg["micro_batch"] > 1 else "")
        groups.setdefault(key, []).append(float(m.group(3)))
    return groups


def stats(e):
    return statistics.median(e), statistics.median(abs(x) for x in e), max(e, key=abs)


def constants_of(profiles):
    """{(profile file, constant): value} of the top-level constants in a profiles folder."""
    out = {}
    for path in sorted(glob.glob(os.path.join(profiles, "*.json"))):
        with open(path) as f:
            for name, c in json.load(f).get("constants", {}).items():
                out[(os.path.basename(path), name)] = c["value"]
    return out


def one_constant(ftest, root, name, path, left_dir, key, value):
    """The left-out file's errors with one constant of its fit set to the committed profiles' value."""
    d = data_dir(root, "%s+%s" % (name, key[1]))
    prof = os.path.join(d, "calibrate", "profiles")
    shutil.rmtree(prof, ignore_errors=True)
    shutil.copytree(os.path.join(left_dir, "calibrate", "profiles"), prof)
    target = os.path.join(prof, key[0])
    doc = {"schema": "ftest.profile/1", "profile": key[0][:-5], "constants": {}, "gpus": {}}
    if os.path.exists(target):
        with open(target) as f:
            doc = json.load(f)
    doc["constants"][key[1]] = {"value": value, "source": "lodo.py: the committed profile's value"}
    with open(target, "w") as f:
        json.dump(doc, f)
    return errors(ftest, path, dict(os.environ, FTEST_DATA_DIR=d))


def attribution(ftest, root, rows):
    """For each left-out file, each constant whose fit without it differs from the committed
    profiles: the left-out median error of each group with that one constant put back (the
    others as fitted without the file, defaults where nothing fits them). Groups it moves by
    less than half a point, and constants that move none, are left out."""
    committed = constants_of("calibrate/profiles")
    print()
    print("| dataset left out | constant: fitted without it → committed | median error of each group it moves: "
          "fitted without the file → with this one constant committed |")
    print("|---|---|---|")
    for name, path, left_dir, left_errors in rows:
        left = constants_of(os.path.join(left_dir, "calibrate", "profiles"))
        for key in sorted(committed):
            was = left.get(key)
            if was is not None and abs(was - committed[key]) <= 0.005 * abs(committed[key]):
                continue
            groups = one_constant(ftest, root, name, path, left_dir, key, committed[key])
            moved = []
            for g in sorted(groups):
                before, after = stats(left_errors[g])[0], stats(groups[g])[0]
                if abs(after - before) >= 0.5:
                    moved.append("%s: %+.1f%% → %+.1f%%" % (g, before, after))
            if moved:
                print("| %s | `%s`: %s → %.4g | %s |"
                      % (name, key[1], "default" if was is None else "%.4g" % was, committed[key],
                         "; ".join(moved)))


def main(ftest):
    root = os.path.abspath("build/lodo")
    shutil.rmtree(root, ignore_errors=True)
    files = sorted(glob.glob("calibrate/records/*.jsonl"))
    rows = []
    print("| dataset (record file) | group | runs | committed profiles: median, median \\|err\\|, max "
          "| fitted without this file: median, median \\|err\\|, max |")
    print("|---|---|---|---|---|")
    for path in files:
        if not timed(path):
            continue
        name = os.path.basename(path)
        d = data_dir(root, name)
        others = [f for f in files if f != path]
        fit = subprocess.run([ftest, "fit", "--out", os.path.join(d, "calibrate", "profiles")] + others,
                             capture_output=True, text=True)
        if fit.returncode != 0:
            sys.exit("lodo: fit without %s failed: %s" % (name, fit.stderr.strip()[-300:]))
        full = errors(ftest, path, dict(os.environ))
        left = errors(ftest, path, dict(os.environ, FTEST_DATA_DIR=d))
        rows.append((name, path, d, left))
        for key in full:
            a, b = stats(full[key]), stats(left.get(key, [float("nan")]))
            print("| %s | %s | %d | %+.1f%%, %.1f%%, %+.1f%% | %+.1f%%, %.1f%%, %+.1f%% |"
                  % (name, key, len(full[key]), a[0], a[1], a[2], b[0], b[1], b[2]))
    attribution(ftest, root, rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: lodo.py FTEST > table.md")
    main(sys.argv[1])
