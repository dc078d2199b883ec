#!/usr/bin/env python3
"""Leave one dataset out for the host's cost per op (docs/method.md, "The host's
work per step"): for each timed record file, fit the profiles on every other
committed record file with `ftest fit`, then check the file with them, beside
the committed profiles; prints each fold's median |it/s error| and its fitted
kernel_host_overhead_s and DeepSpeed framework_layer_host_s. Standard library
only; run from the repository root after building ftest:

    python3 calibrate/lodo_host.py build/ftest        # folds in build/lodo-host/

(Folds once dropped a negative zero3_pending_free_heads from their profiles;
that memory-side constant is gone: ZeRO-3's pending frees follow from
DeepSpeed's throttles, estimator/frameworks/seam_deepspeed_lag.c.)
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
