#!/usr/bin/env python3
"""Leave one dataset out for the host's cost per op (docs/method.md, "The host's
work per step"): for each timed record file, fit the profiles on every other
committed record file with `ftest fit`, then check the file with them, beside
the committed profiles; prints each fold's median |it/s error| and its fitted
kernel_host_overhead_s and DeepSpeed framework_layer_host_s. Standard library
only; run from the repository root after building ftest:

    python3 calibrate/lodo_host.py build/ftest        # folds in build/lodo-host/

A fit without gpjt-llama3-8b-a100x8.jsonl makes the memory-side constant
zero3_pending_free_heads negative from the H200 records, and ftest refuses such
a profile (calibrate/lodo.py stops at that fold on main at 4ebcdf4 as well):
the fold drops that entry from its profiles. it/s does not read it.
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


def abs_errors(ftest, path, env):
    out = subprocess.run([ftest, "check", path], capture_output=True, text=True, env=env).stdout
    return [abs(float(m.group(3))) for m in LINE.finditer(out)]


def drop_negative_pending_heads(profiles):
    for p in glob.glob(os.path.join(profiles, "*.json")):
        with open(p) as f:
            prof = json.load(f)
        sections = [prof.get("constants", {})] + list(prof.get("gpus", {}).values())
        changed = False
        for sec in sections:
            v = sec.get("zero3_pending_free_heads")
            if v and v["value"] < 0:
                del sec["zero3_pending_free_heads"]
                changed = True
        if changed:
            with open(p, "w") as f:
                json.dump(prof, f, indent=1)


def constant(profiles, name, key):
    p = os.path.join(profiles, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)["constants"].get(key, {}).get("value")


def main(ftest):
    ftest = os.path.abspath(ftest)
    files = sorted(glob.glob("calibrate/records/*.jsonl"))
    root = os.path.abspath(os.path.join("build", "lodo-host"))
    shutil.rmtree(root, ignore_errors=True)
    print("| left out | runs | committed: median \\|err\\| | fitted without it: median \\|err\\| "
          "| kernel_host_overhead_s without it | DeepSpeed framework_layer_host_s without it |")
    print("|---|---|---|---|---|---|")
    for path in files:
        with open(path) as f:
            if not any('"it_per_s"' in line for line in f) or "ftrain-cpu" in path:
                continue
        name = os.path.basename(path)
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "calibrate"))
        os.symlink(os.path.abspath("models"), os.path.join(d, "models"))
        os.symlink(os.path.abspath("calibrate/host"), os.path.join(d, "calibrate", "host"))
        profiles = os.path.join(d, "calibrate", "profiles")
        fit = subprocess.run([ftest, "fit", "--out", profiles] + [f for f in files if f != path],
                             capture_output=True, text=True)
        if fit.returncode != 0:
            sys.exit("lodo_host: fit without %s failed: %s" % (name, fit.stderr.strip()[-300:]))
        drop_negative_pending_heads(profiles)
        left = abs_errors(ftest, path, dict(os.environ, FTEST_DATA_DIR=d))
        committed = abs_errors(ftest, path, dict(os.environ))
        print("| %s | %d | %.1f%% | %.1f%% | %s | %s |"
              % (name, len(left), statistics.median(committed), statistics.median(left),
                 constant(profiles, "pytorch", "kernel_host_overhead_s"),
                 constant(profiles, "deepspeed", "framework_layer_host_s")))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: lodo_host.py FTEST")
    main(sys.argv[1])
