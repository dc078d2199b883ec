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


def main(ftest):
    root = os.path.abspath("build/lodo")
    shutil.rmtree(root, ignore_errors=True)
    files = sorted(glob.glob("calibrate/records/*.jsonl"))
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
        for key in full:
            a, b = stats(full[key]), stats(left.get(key, [float("nan")]))
            print("| %s | %s | %d | %+.1f%%, %.1f%%, %+.1f%% | %+.1f%%, %.1f%%, %+.1f%% |"
                  % (name, key, len(full[key]), a[0], a[1], a[2], b[0], b[1], b[2]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: lodo.py FTEST > table.md")
    main(sys.argv[1])
