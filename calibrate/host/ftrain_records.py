#!/usr/bin/env python3
"""Re-measures ftrain's committed CPU records (issue 23, item 7).

Reads the configurations of a committed record file (default
calibrate/records/ftrain-cpu.jsonl) and runs build/ftrain with each of them
and --steps N (default 10: a record's step_time_s and cpu_wait_s are then
means over steps 2..N, the first step being ftrain's warm-up,
trainer/train.c), --passes K times over the whole list (default 5), appending
every run's final record to RUNS. When RUNS holds K runs of every
configuration, OUT gets one record per committed record, in its order: of its
K runs the one whose step less cpu_wait_s is the median. The committed file is
never written.

Resumable: runs already in RUNS (same configuration and ranks, same steps)
are not run again, and a torn last line (the run killed while appending) is
dropped. Each new record's configuration is compared with the committed one
(everything but `steps`) before it is kept, so a flag this script maps wrongly
stops the run instead of measuring something else.

    python3 calibrate/host/ftrain_records.py [--from FILE] [--runs FILE]
        [--out FILE] [--steps N] [--passes K] [--ftrain build/ftrain]

Exit 0 when OUT is written, 1 when ftrain failed or wrote a different
configuration, 2 on bad input. Progress goes to stderr.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# config key -> ftrain flag, in the order of ftrain's usage (trainer/cli.c).
FLAGS = [
    ("model", "--model"),
    ("layers", "--layers"),
    ("seed", "--seed"),
    ("data", "--data"),
    ("init", "--init"),
    ("seq_len", "--seq"),
    ("micro_batch", "--batch"),
    ("grad_accum", "--grad-accum"),
    ("zero", "--zero"),
    ("offload", "--offload"),
    ("checkpointing", "--checkpointing"),
    ("attention", "--attention"),
    ("loss", "--loss"),
    ("precision", "--precision"),
    ("optimizer", "--optimizer"),
]
# Keys a record's config may hold that have no flag: written by ftrain with
# one value only (record_writer.c), or `steps`, which this script sets.
NO_FLAG = {"expandable_segments": False}


class BadRecord(ValueError):
    pass


def ranks_of(rec):
    hw = rec.get("hardware") or {}
    g, n = hw.get("gpus_per_node"), hw.get("nodes", 1)
    if not isinstance(g, int) or not isinstance(n, int) or g < 1 or n != 1:
        raise BadRecord("hardware must be one node of gpus_per_node >= 1 ranks")
    return g


def flags_of(rec):
    """ftrain's argument list for a committed record's configuration."""
    if rec.get("framework") != "ftrain" or (rec.get("hardware") or {}).get("gpu") != "cpu":
        raise BadRecord("not an ftrain CPU record")
    cfg = rec.get("config")
    if not isinstance(cfg, dict):
        raise BadRecord("no config")
    if "model_config" in cfg:
        raise BadRecord("an inline model_config has no ftrain flag (the run named a config.json path)")
    known = {k for k, _ in FLAGS} | set(NO_FLAG) | {"steps"}
    extra = sorted(set(cfg) - known)
    if extra:
        raise BadRecord("config keys without an ftrain flag: " + ", ".join(extra))
    for k, v in NO_FLAG.items():
        if k in cfg and cfg[k] != v:
            raise BadRecord("config %s = %r: ftrain writes only %r" % (k, cfg[k], v))
    args = []
    for key, flag in FLAGS:
        if key not in cfg:
            raise BadRecord("config has no " + key)
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, (int, str)) or v == "":
            raise BadRecord("config %s = %r is not a flag value" % (key, v))
        args += [flag, str(v)]
    return args + ["--ranks", str(ranks_of(rec))]


def key_of(rec):
    """What must agree between a committed record and its re-measurement."""
    cfg = dict(rec.get("config") or {})
    cfg.pop("steps", None)
    return json.dumps([cfg, ranks_of(rec)], sort_keys=True)


def read_records(path):
    """The final records of a JSONL file; raises BadRecord on a bad line."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise BadRecord("%s:%d: not JSON" % (path, i))
            if not isinstance(rec, dict):
                raise BadRecord("%s:%d: not an object" % (path, i))
            if rec.get("final", True):
                out.append(rec)
    return out


def load_runs(path, steps):
    """The runs RUNS holds at `steps`, as lists of records by key_of. A last
    line that does not parse (torn by a kill) is cut off the file."""
    runs = {}
    if not os.path.exists(path):
        return runs
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    keep = len(data)
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:  # no newline after the last line: it may be torn
        try:
            json.loads(lines[-1])
        except ValueError:
            keep = len(data) - len(lines[-1])
            lines.pop()
    if keep != len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
        print("ftrain_records: dropped a torn last line of %s" % path, file=sys.stderr)
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except ValueError:
            raise BadRecord("%s:%d: not JSON" % (path, i))
        if isinstance(rec, dict) and (rec.get("config") or {}).get("steps") == steps:
            runs.setdefault(key_of(rec), []).append(rec)
    return runs


def occurrences(committed):
    """For each committed record, its key, its rank among the records of that
    key (0, 1, ...) and how many share the key."""
    count, seen, out = {}, {}, []
    for rec in committed:
        k = key_of(rec)
        count[k] = count.get(k, 0) + 1
    for rec in committed:
        k = key_of(rec)
        out.append((k, seen.get(k, 0), count[k]))
        seen[k] = seen.get(k, 0) + 1
    return out


def todo(committed, runs, passes):
    """(pass, index) of the runs still to do, pass by pass, so that each pass
    spans the machine's conditions of its own minutes. The runs of a key are
    dealt to its occurrences in turn (run r to occurrence r mod count)."""
    occ = occurrences(committed)
    left = []
    for p in range(passes):
        for i, (k, o, c) in enumerate(occ):
            if p * c + o >= len(runs.get(k, [])):
                left.append((p, i))
    return left


def own_step_s(rec):
    """The step on cores of its own: step_time_s less cpu_wait_s (0 when absent)."""
    m = rec["measured"]
    return m["step_time_s"] - max(0.0, m.get("cpu_wait_s") or 0.0)


def pick(committed, runs, passes):
    """For each committed record, of its `passes` runs the one whose step less
    its wait is the median (the lower middle for an even count)."""
    out = []
    for k, o, c in occurrences(committed):
        mine = runs.get(k, [])[o::c][:passes]
        if len(mine) < passes:
            raise BadRecord("only %d of %d runs of a configuration" % (len(mine), passes))
        best = dict(sorted(mine, key=own_step_s)[(len(mine) - 1) // 2])
        best["notes"] = "%s; of %d runs of this configuration the one of median step_time_s - cpu_wait_s" % (
            best.get("notes", "calibrate/host/ftrain_records.py"), passes)
        out.append(best)
    return out


def check_new(new, old, steps):
    """Why a re-measured record does not stand for the committed one, or None."""
    if key_of(new) != key_of(old):
        return "its configuration differs from the committed record's"
    if (new.get("config") or {}).get("steps") != steps:
        return "it ran %r steps, not %d" % ((new.get("config") or {}).get("steps"), steps)
    m = new.get("measured") or {}
    if m.get("oom") or m.get("steps_done") != steps or not m.get("step_time_s"):
        return "it stopped early or has no step time"
    return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def run_one(ftrain, rec, steps):
    """Runs ftrain for one record; returns its final record (dict)."""
    fd, tmp = tempfile.mkstemp(prefix="ftrain-records-", suffix=".jsonl")
    os.close(fd)
    try:
        argv = [ftrain, "--quiet", "--steps", str(steps), "--record", tmp] + flags_of(rec)
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("ftrain exited %d: %s" % (r.returncode, r.stderr.strip()))
        finals = read_records(tmp)
        if len(finals) != 1:
            raise RuntimeError("ftrain wrote %d final records" % len(finals))
        return finals[0]
    finally:
        os.unlink(tmp)


def append(path, rec):
    line = json.dumps(rec, separators=(",", ":")) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path, recs):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for rec in recs:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def measure(a, committed, runs):
    """Runs what RUNS lacks, appending each run; 0, or 1 when a run failed."""
    left = todo(committed, runs, a.passes)
    n = len(committed)
    print("ftrain_records: %d of %d runs (%d passes over the %d configurations of %s, --steps %d) to do into %s;"
          " load average %s" % (len(left), a.passes * n, a.passes, n, a.src, a.steps, a.runs, loadavg()),
          file=sys.stderr)
    t0 = time.monotonic()
    for j, (p, i) in enumerate(left, 1):
        old = committed[i]
        t1, load = time.monotonic(), loadavg()
        try:
            new = run_one(a.ftrain, old, a.steps)
            why = check_new(new, old, a.steps)
        except (OSError, RuntimeError, BadRecord) as e:
            why = str(e)
        if why:
            print("ftrain_records: record %d (%s): %s" % (i + 1, " ".join(flags_of(old)), why), file=sys.stderr)
            return 1
        new["notes"] = "calibrate/host/ftrain_records.py: pass %d of %d, load average %s before the run" % (
            p + 1, a.passes, load)
        append(a.runs, new)
        m = new["measured"]
        print("[%d/%d] pass %d record %d: %.3f ms/step, waited %.3f ms (committed %.3f ms), %.1f s, load %s: %s"
              % (j, len(left), p + 1, i + 1, 1e3 * m["step_time_s"], 1e3 * (m.get("cpu_wait_s") or 0.0),
                 1e3 * old["measured"]["step_time_s"], time.monotonic() - t1, loadavg(),
                 " ".join(flags_of(old))), file=sys.stderr)
    print("ftrain_records: %d runs done now in %.0f s; load average %s" % (len(left), time.monotonic() - t0, loadavg()),
          file=sys.stderr)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", default="calibrate/records/ftrain-cpu.jsonl")
    ap.add_argument("--runs", default="build/ftrain-cpu-runs.jsonl")
    ap.add_argument("--out", default="build/ftrain-cpu-remeasured.jsonl")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--ftrain", default="build/ftrain")
    a = ap.parse_args(argv)
    if a.steps < 2 or a.passes < 1:
        print("ftrain_records: --steps must be at least 2 (step 1 is the warm-up), --passes at least 1",
              file=sys.stderr)
        return 2
    if len({os.path.abspath(x) for x in (a.src, a.runs, a.out)}) != 3:
        print("ftrain_records: --from, --runs and --out must be three different files", file=sys.stderr)
        return 2
    try:
        committed = read_records(a.src)
        for i, rec in enumerate(committed, 1):
            try:
                flags_of(rec)
            except BadRecord as e:
                raise BadRecord("%s record %d: %s" % (a.src, i, e))
        runs = load_runs(a.runs, a.steps)
    except (OSError, BadRecord) as e:
        print("ftrain_records: %s" % e, file=sys.stderr)
        return 2
    rc = measure(a, committed, runs)
    if rc:
        return rc
    write_atomic(a.out, pick(committed, load_runs(a.runs, a.steps), a.passes))
    print("ftrain_records: %d records (per configuration the run of median step less cpu_wait_s of %d) in %s"
          % (len(committed), a.passes, a.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
