#!/usr/bin/env python3
"""ftrain against PyTorch + Transformers on this CPU (issue 14): training
tokens/s of the same Llama shapes, fp32, PyTorch eager and torch.compile.

Runs alternate (ftrain, eager, compiled, then rotated: eager, compiled,
ftrain, ...) so that load from other work on a shared machine falls on every
side alike; the table gives the median and the range (min-max) of each side
and the ratios of the medians.

Both sides: batch 4 x seq 128 per step, AdamW (lr 1e-3, betas 0.9/0.999, eps
1e-8, no weight decay), gradient norm clipped to 1, random-initialized
weights; tokens/s = tokens per step / mean step time over steps 2..S (the
first step warms caches and allocators; ftrain reports the same statistic).
torch.compile (default mode, the inductor backend) wraps the model; the
optimizer step stays eager. Its run has one step more and leaves out the first
two (compilation of the forward and backward graphs falls in step 1; step 2
is left out too in case a guard recompiles), so it too averages S-1 steps.
ftrain trains its seeded synthetic next-token task, PyTorch random token ids
with labels = ids (Transformers shifts them): the work per step is the same.

Without PyTorch and Transformers the comparison is skipped with a message
(exit 0); `--baseline OLD_FTRAIN` still measures ftrain against an older
ftrain binary (before/after a change), alternating the same way.

    python3 tests/bench/cpu_vs_torch.py --ftrain build/ftrain [--threads 1,2]
        [--reps 3] [--sizes tiny,small,medium] [--no-compile] [--torch-env NAME=VALUE]
        [--baseline OLD] [--doc docs/performance.md]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
BATCH, SEQ = 4, 128
# Steps per run: enough steady-state steps for a stable mean, few enough that a
# run of the largest model stays under a minute on two cores.
STEPS = {"tiny": 20, "small": 8, "medium": 4}
TORCH_ENV = {}  # --torch-env: extra environment of the PyTorch runs only
MARK_BEGIN = "<!-- BEGIN CPU-VS-TORCH"
MARK_END = "<!-- END CPU-VS-TORCH"


def config_path(size):
    return os.path.join(MODELS, "bench-%s.json" % size)


def run_ftrain(binary, size, threads, steps):
    cmd = [binary, "--model", config_path(size), "--seq", str(SEQ), "--batch", str(BATCH),
           "--steps", str(steps), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"([0-9.]+) tokens/s", out.stderr)
    if out.returncode != 0 or not m:
        sys.exit("bench-cpu-vs-torch: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    return float(m.group(1))


def run_torch(size, threads, steps, compiled=False):
    """tokens/s of one PyTorch run in a fresh process; for torch.compile, None
    and the reason when it fails (the table then says so)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", size, "--threads", str(threads),
           "--steps", str(steps)] + (["--compile"] if compiled else [])
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **TORCH_ENV))
    m = re.search(r"([0-9.]+) tokens/s", out.stdout)
    if out.returncode != 0 or not m:
        if compiled:
            lines = [l for l in out.stderr.strip().splitlines() if l.strip()]
            return None, lines[-1] if lines else "exit status %d" % out.returncode
        sys.exit("bench-cpu-vs-torch: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    return float(m.group(1)), None


def torch_worker(size, threads, steps, compiled):
    """One PyTorch training run in this process; prints tokens/s."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    with open(config_path(size)) as f:
        cfg = json.load(f)
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    model = transformers.LlamaForCausalLM(config).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    if compiled:
        model = torch.compile(model)
        steps += 1
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    skip = 2 if compiled else 1
    steady = times[skip:] if len(times) > skip else times
    print("%.1f tokens/s" % (BATCH * SEQ / (sum(steady) / len(steady))))


def torch_versions():
    try:
        import torch
        import transformers
    except ImportError:
        return None
    return "torch %s, transformers %s" % (torch.__version__, transformers.__version__)


def compiler_available():
    """Why torch.compile cannot run here, or None: inductor's CPU code is C++
    compiled at run time, so it needs a C++ compiler (torch looks for $CXX,
    else c++/g++/clang++)."""
    import shutil
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    return None if cxx else "no C++ compiler (c++, g++ or clang++; $CXX unset) for inductor's CPU kernels"


def summary(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt(xs):
    med, lo, hi = summary(xs)
    return "%s (%s-%s)" % (f"{med:,.0f}", f"{lo:,.0f}", f"{hi:,.0f}")


def params_of(binary, size):
    out = subprocess.run([binary, "--model", config_path(size), "--seq", "8", "--batch", "1", "--steps", "1",
                          "--threads", "1"], capture_output=True, text=True)
    m = re.search(r"([0-9]+) params", out.stderr)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftrain", default="build/ftrain")
    ap.add_argument("--baseline", help="an older ftrain binary to compare against instead of PyTorch")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="tiny,small,medium")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: per size)")
    ap.add_argument("--doc", help="splice the table into this Markdown file between the CPU-VS-TORCH markers")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager only")
    ap.add_argument("--torch-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of the PyTorch runs, such as OMP_WAIT_POLICY=PASSIVE (repeatable)")
    ap.add_argument("--torch-worker", metavar="SIZE")
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        torch_worker(a.torch_worker, int(a.threads), a.steps or STEPS[a.torch_worker], a.compile)
        return 0

    for kv in a.torch_env:
        name, eq, value = kv.partition("=")
        if not eq or not name:
            sys.exit("bench-cpu-vs-torch: --torch-env expects NAME=VALUE, got %r" % kv)
        TORCH_ENV[name] = value
    versions = None
    if not a.baseline:
        versions = torch_versions()
        if versions is None:
            print("bench-cpu-vs-torch: skipped: PyTorch and Transformers are not importable by %s.\n"
                  "  Install them (PyPI): %s -m pip install torch transformers\n"
                  "  then: make bench-cpu-vs-torch PYTHON=%s" % (sys.executable, sys.executable, sys.executable))
            return 0
    sizes = a.sizes.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    other = "baseline" if a.baseline else "torch"
    sides = ["ftrain", other]
    no_compile = None
    if not a.baseline:
        no_compile = "not asked (--no-compile)" if a.no_compile else compiler_available()
        if not no_compile:
            sides.append("compiled")
    res = {(s, t, side): [] for s in sizes for t in threads for side in sides}
    loads = []
    for rep in range(a.reps):
        for s in sizes:
            steps = a.steps or STEPS[s]
            for t in threads:
                # Rotate which side goes first, so none always runs after the same one.
                order = sides[rep % len(sides):] + sides[:rep % len(sides)]
                for side in order:
                    if side == "ftrain":
                        v = run_ftrain(a.ftrain, s, t, steps)
                    elif side == "baseline":
                        v = run_ftrain(a.baseline, s, t, steps)
                    else:
                        v, why = run_torch(s, t, steps, compiled=side == "compiled")
                        if v is None:
                            no_compile = "failed: " + why
                            print("rep %d %-6s %d thread(s) torch.compile %s" % (rep + 1, s, t, no_compile), flush=True)
                            continue
                    res[(s, t, side)].append(v)
                    print("rep %d %-6s %d thread(s) %-8s %10.1f tokens/s" % (rep + 1, s, t, side, v), flush=True)
                loads.append(os.getloadavg()[0])

    head_other = "ftrain before (baseline)" if a.baseline else "PyTorch eager"
    compiled = "compiled" in sides
    head = "| model | params | threads | ftrain tokens/s | %s tokens/s | ratio |" % head_other
    rule = "|---|---|---|---|---|---|"
    if compiled:
        head += " torch.compile tokens/s | ratio |"
        rule += "---|---|"
    lines = [head, rule]
    for s in sizes:
        p = params_of(a.ftrain, s)
        for t in threads:
            f, o = res[(s, t, "ftrain")], res[(s, t, other)]
            row = "| %s | %.1fM | %d | %s | %s | %.2f |" % (
                s, p / 1e6, t, fmt(f), fmt(o), statistics.median(f) / statistics.median(o))
            if compiled:
                c = res[(s, t, "compiled")]
                row += " %s | %s |" % ((fmt(c), "%.2f" % (statistics.median(f) / statistics.median(c)))
                                       if c else ("failed", "-"))
            lines.append(row)
    load = os.getloadavg()
    lines.append("")
    if TORCH_ENV:
        lines.append("PyTorch runs with %s." % ", ".join("%s=%s" % kv for kv in sorted(TORCH_ENV.items())))
        lines.append("")
    if no_compile and not a.baseline:
        lines.append("torch.compile: %s." % no_compile)
        lines.append("")
    # OpenBLAS honours OPENBLAS_CORETYPE from the environment over its own CPU
    # detection; PyTorch's CPU kernels do not read it. Say which was in force.
    core = os.environ.get("OPENBLAS_CORETYPE")
    lines.append("Medians of %d alternating runs (range min-max), batch %d x seq %d, %s; "
                 "OPENBLAS_CORETYPE %s; 1-minute load average %.1f-%.1f during the runs, %.1f at the end "
                 "(a shared machine). Measured %s." % (
                     a.reps, BATCH, SEQ, versions or "ftrain against its baseline binary",
                     "=" + core if core else "unset (OpenBLAS picks its kernels)", min(loads), max(loads), load[0],
                     time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    table = "\n".join(lines)
    print(table)
    if a.doc:
        with open(a.doc) as f:
            doc = f.read()
        b, e = doc.find(MARK_BEGIN), doc.find(MARK_END)
        if b < 0 or e < b:
            sys.exit("bench-cpu-vs-torch: %s has no %s ... %s markers" % (a.doc, MARK_BEGIN, MARK_END))
        b = doc.index("\n", b) + 1
        with open(a.doc, "w") as f:
            f.write(doc[:b] + table + "\n" + doc[e:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
