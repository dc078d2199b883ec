#!/usr/bin/env python3
"""make gpu-day: one command that measures what a lent GPU can tell ftest, in
priority order, inside a device-time budget, resumable (docs/gpu-day.md).

    python3 calibrate/gpu_day/gpu_day.py --out DIR [--budget-min 12] [--call-min 9.5]
    python3 calibrate/gpu_day/gpu_day.py --plan          the plan and its estimates
    python3 calibrate/gpu_day/gpu_day.py --dry-run ...   the same driver on a fake device

Run from the repository root on a machine with one NVIDIA GPU, with the
machine's python3 (the driver needs the standard library only; the probe and
the benchmark need torch and transformers there). Everything it writes is in
--out (at most 8 files, outputs.py), its scratch in --work. A second
invocation with the same --out continues where the first stopped: the
budget is for all calls together, --call-min for this one.

Exit status: 0 when the call ran (done, or stopped at its limit or the
budget: the manifest says which and what is left), 2 for bad arguments or an
output folder it cannot use."""

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checks  # noqa: E402
import outputs  # noqa: E402
import plan as pl  # noqa: E402
import runner  # noqa: E402
import state as st  # noqa: E402

END_MARGIN_S = 30.0       # kept at the end of a call: validation (at most 25 s), manifest, limits
DRY_RUN_SCALE = 0.01      # a dry run's device second, in real seconds
GPU_KEYS = (("H200", "h200-141gb"), ("H100 PCIe", "h100-pcie-80gb"), ("H100", "h100-80gb"),
            ("A100-SXM4-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("L40S", "l40s-48gb"))
NEEDS_FROM_VERSIONS = ("torch", "transformers", "peft", "deepspeed", "bitsandbytes", "liger_kernel")


class Clock:
    """Device seconds since the call began: real ones, or scaled in a dry run."""

    def __init__(self, scale):
        self.scale, self.t0 = scale, time.monotonic()

    def now(self):
        return (time.monotonic() - self.t0) / self.scale


class Context:
    def __init__(self, a):
        self.a, self.root, self.dry_run = a, os.getcwd(), a.dry_run
        self.out, self.work = os.path.abspath(a.out), os.path.abspath(a.work or self._default_work(a.out))
        self.budget_s, self.call_s = 60.0 * a.budget_min, 60.0 * a.call_min
        scale = float(os.environ.get("GPU_DAY_TIME_SCALE", DRY_RUN_SCALE)) if a.dry_run else 1.0
        self.clock, self.poll_s = Clock(scale), min(0.2, 2.0 * scale)
        self.seq, self.last_beat, self.call, self.limit_s = 0, 0.0, 1, self.call_s
        self.gpu_key, self.gpu_name, self.driver, self.versions = "h100-80gb", None, None, {}
        self.available, self.git, self.state, self.ratio = set(), git_commit(self.root), None, {}
        self.site = os.path.join(self.work, "site")
        self._tools(a)

    @staticmethod
    def _default_work(out):
        h = hashlib.sha1(os.path.abspath(out).encode()).hexdigest()[:10]
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpu_day-{h}")

    def _tools(self, a):
        py, fake = a.python or sys.executable, [sys.executable, os.path.join(HERE, "fake_device.py")]
        bindir = a.bin if os.path.isdir(a.bin) else "build"
        self.bindir = os.path.abspath(bindir)
        ftrain, ftest = os.path.join(self.bindir, "ftrain"), os.path.join(self.bindir, "ftest")
        if self.dry_run:
            self.probe_cmd, self.ftrain_cmd = fake + ["probe"] + self.repeat_args(), fake + ["ftrain"]
            self.gpu_parity_cmd, self.torch_bench_cmd = fake + ["gpu_parity"], fake + ["torch_bench"]
            self.ftest, self.real_ftrain = os.path.abspath(os.path.join("build", "ftest")), \
                os.path.abspath(os.path.join("build", "ftrain"))
            return
        self.probe_cmd = [py, os.path.join(self.root, "calibrate", "probes", "ftest_probe.py")] \
            + self.repeat_args()
        self.ftrain_cmd, self.ftest = [ftrain], ftest
        self.gpu_parity_cmd = [os.path.join(self.bindir, "gpu_parity")]
        self.torch_bench_cmd = [py, os.path.join(HERE, "torch_bench.py")]

    def repeat_args(self):
        """--repeat-short for every probe process (docs/gpu-day.md, "Per step"); none when 0."""
        n = getattr(self.a, "repeat_short", 0)
        return ["--repeat-short", str(n)] if n else []

    # --- files and events ---
    def out_file(self, name):
        return os.path.join(self.out, name)

    def work_file(self, name):
        return os.path.join(self.work, name)

    def next_seq(self):
        self.seq += 1
        return f"{self.call}-{self.seq}"

    def event(self, kind, **fields):
        ev = {"event": kind, "call": self.call, "at": round(self.clock.now(), 3), **fields}
        st.append_json(self.out_file("state.jsonl"), ev)
        self.state.apply(ev)
        self.last_beat = ev["at"]

    def heartbeat(self):
        if self.clock.now() - self.last_beat >= runner.HEARTBEAT_S:
            self.event("heartbeat")

    def end_point(self, ident, outcome, elapsed_s, message, final):
        self.event("point-end", point=ident, outcome=outcome, elapsed_s=round(elapsed_s, 3),
                   message=message, final=final)
        self.log(f"  {outcome:<8} {elapsed_s:7.1f} s  {ident}  {message}")

    def log(self, text):
        line = f"[{datetime.datetime.now().strftime('%H:%M:%S')} {self.clock.now():7.1f}s] {text}"
        print(line, flush=True)
        with open(self.out_file("log.txt"), "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def child_log(self, name, cmd, res):
        path = self.out_file("log.txt")
        if os.path.exists(path) and os.path.getsize(path) > outputs.LOG_CAP_BYTES:
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"--- {name}: exit {res.rc}{' (watchdog)' if res.timed_out else ''}"
                    f"{' (deadline)' if res.cut else ''}: {' '.join(str(c) for c in cmd)[:600]}\n")
            f.write(runner.tail(res.log_path, 60) + "\n")

    # --- time ---
    def deadline(self):
        return self.limit_s - END_MARGIN_S

    def call_left(self):
        return self.deadline() - self.clock.now()

    def budget_left(self):
        return self.budget_s - self.state.spent_s()

    def child_env(self):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if os.path.isdir(self.site):
            env["PYTHONPATH"] = self.site + os.pathsep + env.get("PYTHONPATH", "")
        libs = [os.path.join(self.bindir, "lib")] + cuda_lib_dirs()
        env["LD_LIBRARY_PATH"] = os.pathsep.join([d for d in libs if os.path.isdir(d)] +
                                                 [env.get("LD_LIBRARY_PATH", "")])
        if self.dry_run:
            env.update(GPU_DAY_TIME_SCALE=str(self.clock.scale), GPU_DAY_REAL_FTRAIN=self.real_ftrain,
                       GPU_DAY_FAKE_DIR=self.work)
        return env

    def limit_of(self, p):
        """The watchdog's limit for point p (device seconds); a dry run keeps
        at least 3 real seconds, so a loaded CI machine's start-up of the fake
        commands is not taken for a hang."""
        floor = max(runner.MIN_POINT_LIMIT_S, 3.0 / self.clock.scale if self.dry_run else 0.0)
        return runner.point_limit(p["est_s"], floor)

    def start_limit(self):
        """How long a probe process may take to start its first point."""
        return max(runner.START_LIMIT_S, 5.0 / self.clock.scale if self.dry_run else 0.0)

    def gpu_bf16_flops(self):
        try:
            with open(os.path.join(self.root, "models", "gpus.json"), encoding="utf-8") as f:
                cat = json.load(f)
        except (OSError, ValueError):
            return None
        gpus = cat.get("gpus", cat) if isinstance(cat, dict) else cat
        for g in gpus if isinstance(gpus, list) else []:
            if g.get("name") == self.gpu_key or g.get("key") == self.gpu_key:
                return float(g.get("bf16_tflops", 0)) * 1e12 or None
        return None


def cuda_lib_dirs():
    """Where this python's CUDA wheels keep cuBLASLt 13 and the runtime (torch
    cu130 brings them), for an ftrain built elsewhere against CUDA 13 when the
    machine's /usr/local/cuda/lib64 lacks them."""
    import glob
    pats = [os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "*", "lib"),
            os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu13", "lib")]
    return sorted({d for pat in pats for d in glob.glob(pat)
                   if glob.glob(os.path.join(d, "libcublasLt.so*")) or glob.glob(os.path.join(d, "libcudart.so*"))})


def git_commit(root):
    try:
        r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- set-up (every call: the machine may be a fresh one) -----------------------

def gpu_key_of(name):
    for marker, key in GPU_KEYS:
        if name and marker.lower() in name.lower():
            return key
    return None


def setup_gpu(ctx):
    if ctx.dry_run:
        name, mem, drv = "NVIDIA H100 80GB HBM3 (dry run: fake device)", "81559 MiB", "fake"
    else:
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
            name, mem, drv = [x.strip() for x in (r.stdout.splitlines() or [",,"])[0].split(",")][:3]
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            ctx.event("setup", what="gpu", ok=False, detail=f"nvidia-smi: {e}")
            return
    ctx.gpu_name, ctx.driver = name, drv
    ctx.gpu_key = ctx.a.gpu or gpu_key_of(name) or ctx.gpu_key
    ctx.event("setup", what="gpu", ok=True, detail={"name": name, "memory": mem, "driver": drv,
                                                     "catalog_key": ctx.gpu_key})


def setup_wheels(ctx):
    """Installs the carried wheels (make gpu-wheels) into the scratch folder;
    children get it first on PYTHONPATH. A machine kept warm keeps it."""
    wheels = sorted(os.path.join(ctx.a.wheels, w) for w in os.listdir(ctx.a.wheels)
                    if w.endswith(".whl")) if os.path.isdir(ctx.a.wheels) else []
    if not wheels:
        ctx.event("setup", what="wheels", ok=False, detail=f"no wheels in {ctx.a.wheels} (make gpu-wheels)")
        return
    names = [os.path.basename(w) for w in wheels]
    marker = os.path.join(ctx.site, ".installed")
    if os.path.exists(marker) and open(marker, encoding="utf-8").read() == "\n".join(names):
        ctx.event("setup", what="wheels", ok=True, detail={"installed_before": names})
        return
    if ctx.dry_run:
        os.makedirs(ctx.site, exist_ok=True)
        res_rc, out = 0, "dry run: not installed"
    else:
        cmd = [ctx.a.python or sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-compile", "--no-cache-dir", "--upgrade", "--target", ctx.site] + wheels
        res = runner.run_command(ctx, cmd, 180.0, "wheels", hard=True)
        res_rc, out = res.rc, res.last_line()
    if res_rc == 0:
        with open(marker, "w", encoding="utf-8") as f:
            f.write("\n".join(names))
    ctx.event("setup", what="wheels", ok=res_rc == 0, detail={"wheels": names, "pip": out})


def setup_versions(ctx):
    res = runner.run_command(ctx, ctx.probe_cmd + ["--versions"], 120.0, "versions", hard=True)
    text = open(res.log_path, encoding="utf-8", errors="replace").read()
    start = text.rfind("\n{")
    try:
        ctx.versions = json.loads(text[start + 1:] if start >= 0 else text[text.index("{"):])
    except ValueError:
        ctx.versions = {}
    ctx.available |= {k for k in NEEDS_FROM_VERSIONS if ctx.versions.get(k)}
    ctx.event("setup", what="versions", ok=bool(ctx.versions), detail=ctx.versions or res.last_line())


def unpack_binaries(ctx):
    """--bin-archive (make gpu-wheels' .gpuday-bin.tar.xz, what travels) into
    the scratch folder, when --bin is not a folder here."""
    import tarfile
    arc = ctx.a.bin_archive
    if ctx.dry_run or os.path.isdir(ctx.a.bin) or not os.path.isfile(arc):
        return
    dest = ctx.work_file("bin")
    shutil.rmtree(dest, ignore_errors=True)
    with tarfile.open(arc, "r:xz") as t:
        t.extractall(dest)
    inner = [os.path.join(dest, d) for d in os.listdir(dest)]
    ctx.a.bin = inner[0] if len(inner) == 1 and os.path.isdir(inner[0]) else dest
    ctx._tools(ctx.a)


def setup_binaries(ctx):
    """ftrain, ftest and gpu_parity (carried in --bin or --bin-archive, or built in build/)."""
    unpack_binaries(ctx)
    found = {}
    for name, cmd in (("ftrain", ctx.ftrain_cmd + ["--help"]), ("gpu_parity", None),
                      ("ftest", [ctx.ftest, "--help"])):
        if cmd is None:
            ok = ctx.dry_run or os.access(ctx.gpu_parity_cmd[0], os.X_OK)
        else:
            ok = runner.run_command(ctx, cmd, 60.0, f"bin-{name}", hard=True).rc == 0
        found[name] = ok
        if ok:
            ctx.available.add(name)
    ctx.event("setup", what="binaries", ok=all(found.values()), detail={"dir": ctx.bindir, **found})


def setup(ctx):
    os.makedirs(ctx.work, exist_ok=True)
    setup_gpu(ctx)
    setup_wheels(ctx)
    setup_versions(ctx)
    setup_binaries(ctx)


# --- the schedule ---------------------------------------------------------------

def unmet(ctx, p):
    missing = [n for n in p["needs"] if n not in ctx.available]
    return ", ".join(missing)


def est(ctx, p):
    """The point's estimate scaled by what its group (or job) took so far."""
    key = p.get("group") or p["job"]
    done = [(q["est_s"], ctx.state.point(q["id"]).elapsed_s) for q in ctx.plan
            if (q.get("group") or q["job"]) == key and ctx.state.point(q["id"]).status == "final"
            and ctx.state.point(q["id"]).outcome in ("ok", "oom") and ctx.state.point(q["id"]).elapsed_s > 0]
    r = sum(b for _, b in done) / sum(a for a, _ in done) if done else 1.0
    return p["est_s"] * min(4.0, max(0.3, r))


def repeat_cost(ctx, p):
    """What --repeat-short adds to a point: it runs again at its process's end,
    so the chunk and the budget keep room for it (its estimate again); the
    group's measured ratio (est) is from the points' own times, repeats apart."""
    return est(ctx, p) if pl.repeats(p, getattr(ctx.a, "repeat_short", 0)) else 0.0


def pending(ctx):
    return [p for p in ctx.plan if ctx.state.point(p["id"]).status == "pending" and p["id"] not in ctx.deferred]


def chunk_of(ctx, todo, first, room):
    """The consecutive pending points of first's group that fit `room`."""
    chunk, used = [], pl.start_cost(first)
    for p in todo[todo.index(first):]:
        if p.get("group") != first["group"] or unmet(ctx, p) or p["group"] in ctx.broken:
            break
        if used + est(ctx, p) + repeat_cost(ctx, p) > room and chunk:
            break
        chunk.append(p)
        used += est(ctx, p) + repeat_cost(ctx, p)
    return chunk


def run_probe_chunk(ctx, chunk):
    ctx.log(f"probe {chunk[0]['group']}: {len(chunk)} points, about {sum(est(ctx, p) for p in chunk):.0f} s")
    ended = runner.ProbeRun(ctx, chunk[0]["group"], chunk).run()
    g = chunk[0]["group"]
    if ended < 0 and ctx.clock.now() <= ctx.deadline():  # no point started: a process that cannot start
        ctx.start_failures[g] = ctx.start_failures.get(g, 0) + 1
        if ctx.start_failures[g] >= 2:
            ctx.broken[g] = "the probe process ended twice before starting a point (log.txt has its output)"
    # Only this call's errors break the group: a later call may run a fixed
    # probe (2026-11-26: ds-w8-r7's two errors of call 1, before the probe
    # skipped ZeRO-3's cross-rank check, kept the group skipped after one ok
    # point in each of calls 5, 6 and 7, under the old error's message).
    errors = [q for q in ctx.plan if q.get("group") == g and ctx.state.point(q["id"]).outcome == "error"
              and ctx.state.point(q["id"]).status == "final"
              and ctx.state.point(q["id"]).calls[-1:] == [ctx.call]]
    if len(errors) >= 2:
        ctx.broken[g] = "two points failed: " + ctx.state.point(errors[-1]["id"]).message[:200]


def run_single(ctx, p):
    ctx.event("point-start", point=p["id"], first_in_process=True)
    fn = checks.run_ftrain_point if p["kind"] == "ftrain" else checks.CHECKS[p["run"]]
    try:
        outcome, elapsed, msg, final = fn(ctx, p)
    except Exception as e:  # the driver's boundary: a check's own failure ends that point only
        outcome, elapsed, msg, final = "error", 0.0, f"{type(e).__name__}: {e}", True
    ctx.end_point(p["id"], outcome, elapsed, msg, final)


def decide(ctx, p):
    """Whether to run p now: None (run it), 'skip: why' or 'stop: why'."""
    why = unmet(ctx, p)
    if why:
        return f"skip: needs {why} (not installed or not built on this machine)"
    if p.get("group") in ctx.broken:
        return "skip: " + ctx.broken[p["group"]]
    cost = est(ctx, p) + repeat_cost(ctx, p) + pl.start_cost(p)
    if cost > ctx.budget_left() - END_MARGIN_S:
        return f"skip: over budget (about {cost:.0f} s, {max(0.0, ctx.budget_left()):.0f} s left)"
    if cost > ctx.call_s - END_MARGIN_S - pl.SETUP_EST_S:
        return f"skip: longer than a call (about {cost:.0f} s)"
    if cost > ctx.call_left():
        return "stop: call-limit"
    return None


def schedule(ctx):
    """Runs pending points in plan order until none is left or the call ends."""
    while True:
        todo = pending(ctx)
        if not todo:
            return "complete"
        p = todo[0]
        d = decide(ctx, p)
        if d and d.startswith("skip"):
            ctx.deferred[p["id"]] = d[6:]
            ctx.event("defer", point=p["id"], reason=d[6:])
            ctx.log(f"  skipped  {p['id']}: {d[6:]}")
            continue
        if d:
            return d[6:]
        if p["kind"] == "probe":
            run_probe_chunk(ctx, chunk_of(ctx, todo, p, min(ctx.call_left(), ctx.budget_left() - END_MARGIN_S)))
        else:
            run_single(ctx, p)
        outputs.write_manifest(ctx, ctx.plan, "running")
        if ctx.clock.now() > ctx.deadline():
            return "call-limit"


# --- validation, manifest, main -------------------------------------------------

def validate(ctx):
    """Every record of the day through `ftest check` and `ftest fit` as they
    are: readable means no ERROR line and no unreadable record (check's exit 1
    only says a record is outside its tolerance, a finding, not a fault; fit
    may find too few records to determine a constant)."""
    files = [ctx.out_file(n) for n in ("probe.jsonl", "ftrain-gpu.jsonl")
             if os.path.exists(ctx.out_file(n)) and os.path.getsize(ctx.out_file(n))]
    if not files or "ftest" not in ctx.available:
        ctx.event("setup", what="validation", ok=not files,
                  detail="no records yet" if not files else "no ftest binary: validate after the day")
        return
    res = runner.run_command(ctx, [ctx.ftest, "check", "--quiet"] + files, 10.0, "validate-check", hard=True)
    check_out = runner.tail(res.log_path, 12)
    fit_dir = ctx.work_file("fit")
    fres = runner.run_command(ctx, [ctx.ftest, "fit"] + files + ["--out", fit_dir], 15.0, "validate-fit", hard=True)
    fit_out = runner.tail(fres.log_path, 12)
    readable = res.rc in (0, 1) and " 0 unreadable" in check_out and "ERROR" not in fit_out \
        and "unreadable" not in fit_out
    st.append_json(ctx.out_file("results.jsonl"),
                   {"validation": f"call-{ctx.call}", "files": [os.path.basename(f) for f in files],
                    "readable": readable, "check_rc": res.rc, "check": check_out, "fit_rc": fres.rc,
                    "fit": fit_out})
    ctx.event("setup", what="validation", ok=readable, detail={"check_rc": res.rc, "fit_rc": fres.rc})
    ctx.log(f"validation: ftest check exit {res.rc}, ftest fit exit {fres.rc}: "
            f"{'every record readable' if readable else 'SOME RECORD UNREADABLE (results.jsonl)'}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output folder (at most 8 files come back from the device)")
    p.add_argument("--work", help="scratch folder (default: $TMPDIR/gpu_day-HASH of --out)")
    p.add_argument("--budget-min", type=float, default=12.0,
                   help="device minutes for all calls together (default 12: docs/gpu-day.md)")
    p.add_argument("--call-min", type=float, default=9.5,
                   help="minutes for this call (the device tool stops a command at 10)")
    p.add_argument("--wheels", default=".whl", help="wheels to install (make gpu-wheels)")
    p.add_argument("--bin", default=".gpuday-bin", help="ftrain, ftest, gpu_parity (make gpu-wheels)")
    p.add_argument("--bin-archive", default=".gpuday-bin.tar.xz",
                   help="the same, packed: unpacked into --work when --bin is absent")
    p.add_argument("--python", help="the python with torch (default: this one)")
    p.add_argument("--gpu", help="the models/gpus.json key (default: from nvidia-smi)")
    p.add_argument("--plan", action="store_true", help="print the plan and its estimates, run nothing")
    p.add_argument("--only", help="only the points whose id contains this text")
    p.add_argument("--retry", action="store_true", help="run failed points (error, timeout, killed) again")
    p.add_argument("--thin", type=int, default=1, metavar="K",
                   help="every K-th point of each job, the checks all (a short dry run)")
    p.add_argument("--dry-run", action="store_true", help="a fake device (GPU_DAY_TIME_SCALE)")
    p.add_argument("--repeat-short", type=int, default=0, metavar="TOKENS",
                   help="each probe process runs its timed points of at most TOKENS tokens a "
                        "micro-batch again at its end (ftest_probe.py --repeat-short; 0: off)")
    a = p.parse_args(argv)
    if not a.plan and not a.out:
        p.error("--out DIR is required")
    if a.budget_min <= 0 or not 1.0 <= a.call_min <= 10.0 or a.thin < 1 or a.repeat_short < 0:
        p.error("--budget-min must be positive, --call-min within 1..10, --thin at least 1, "
                "--repeat-short not negative")
    return a


def open_out(ctx):
    try:
        os.makedirs(ctx.out, exist_ok=True)
        os.makedirs(ctx.work, exist_ok=True)
        stray = [n for n in os.listdir(ctx.out) if n not in outputs.OUT_FILES]
        if stray:
            raise OSError(f"{ctx.out} holds {', '.join(stray[:3])}: not a gpu-day folder")
    except OSError as e:
        print(f"gpu_day: {e}", file=sys.stderr)
        return False
    return True


def the_plan(a):
    plan = pl.default_plan()
    if a.only:
        plan = [p for p in plan if a.only in p["id"]]
    if a.thin > 1:
        seen = {}
        keep = []
        for p in plan:
            n = seen[p["job"]] = seen.get(p["job"], -1) + 1
            if p["kind"] == "check" or n % a.thin == 0:
                keep.append(p)
        plan = keep
    return plan


def start_call(ctx, a):
    ctx.state = st.load(ctx.out, outputs.RECORD_FILES)
    ctx.call = ctx.state.next_call()
    ctx.limit_s = min(ctx.call_s, ctx.budget_s - ctx.state.spent_s())
    ctx.broken, ctx.start_failures, ctx.deferred = {}, {}, {}
    if a.retry:
        for p in ctx.plan:
            ps = ctx.state.point(p["id"])
            if ps.status == "final" and ps.outcome in ("error", "timeout", "killed"):
                ctx.event("retry", point=p["id"])
    ctx.event("call-start", budget_s=ctx.budget_s, call_s=ctx.call_s, argv=sys.argv[1:],
              plan_points=len(ctx.plan), spent_before_s=round(ctx.state.spent_s(), 1))
    ctx.log(f"make gpu-day: call {ctx.call}, {ctx.limit_s:.0f} s for this call, "
            f"{ctx.budget_s - ctx.state.spent_s():.0f} s of budget left"
            f"{' (DRY RUN: fake device)' if ctx.dry_run else ''}")


def call_status(ctx, reason):
    """complete (nothing pending), budget (pending, the budget spent), resume
    (pending, this call ran out) or blocked (pending points this machine
    cannot run: a package or binary missing, a failing group)."""
    left = [p["id"] for p in ctx.plan if ctx.state.point(p["id"]).status == "pending"]
    if not left:
        return "complete"
    why = [ctx.deferred.get(i, "") for i in left]
    if reason == "budget" or any(w.startswith("over budget") for w in why) or \
            (reason == "call-limit" and ctx.limit_s < ctx.call_s):
        return "budget"
    if reason == "call-limit":
        return "resume"
    return "blocked"


def main(argv):
    a = parse_args(argv)
    if a.plan:
        sys.stdout.write(outputs.plan_text(the_plan(a), 60 * a.budget_min, 60 * a.call_min))
        return 0
    ctx = Context(a)
    ctx.plan = the_plan(a)
    if not open_out(ctx):
        return 2
    start_call(ctx, a)
    if not pending(ctx):
        reason = "complete"
    elif ctx.limit_s <= END_MARGIN_S + pl.SETUP_EST_S:
        reason = "budget"
    else:
        setup(ctx)
        reason = schedule(ctx)
    validate(ctx)
    ctx.event("call-end", reason=reason)
    status = call_status(ctx, reason)
    with open(ctx.out_file("plan.txt"), "w", encoding="utf-8") as f:
        f.write(outputs.plan_text(ctx.plan, ctx.budget_s, ctx.call_s, ctx.state))
    m = outputs.write_manifest(ctx, ctx.plan, status)
    ctx.log(f"call {ctx.call} ended ({reason}): {m['next']}; limits "
            f"{'kept' if m['limits']['ok'] else 'BROKEN: ' + '; '.join(m['limits']['problems'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
