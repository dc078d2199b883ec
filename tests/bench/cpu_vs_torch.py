#!/usr/bin/env python3
"""ftrain against PyTorch + Transformers on this CPU (issue 14): training
tokens/s of the same Llama shapes, fp32, PyTorch eager (no torch.compile).

Runs alternate (ftrain, torch, ftrain, torch, ...) so that load from other
work on a shared machine falls on both sides alike; the table gives the median
and the range (min-max) of each side and the ratio of the medians.

Both sides: batch 4 x seq 128 per step, AdamW (lr 1e-3, betas 0.9/0.999, eps
1e-8, no weight decay), gradient norm clipped to 1, random-initialized
weights; tokens/s = tokens per step / mean step time over steps 2..S (the
first step warms caches and allocators; ftrain reports the same statistic).
ftrain trains its seeded synthetic next-token task, PyTorch random token ids
with labels = ids (Transformers shifts them): the work per step is the same.

Without PyTorch and Transformers the comparison is skipped with a message
(exit 0); `--baseline OLD_FTRAIN` still measures ftrain against an older
ftrain binary (before/after a change), alternating the same way.

    python3 tests/bench/cpu_vs_torch.py --ftrain build/ftrain [--threads 1,2]
        [--reps 3] [--sizes tiny,small,medium] [--baseline OLD] [--doc docs/performance.md]
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


def run_torch(size, threads, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", size, "--threads", str(threads),
           "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"([0-9.]+) tokens/s", out.stdout)
    if out.returncode != 0 or not m:
        sys.exit("bench-cpu-vs-torch: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    return float(m.group(1))


def torch_worker(size, threads, steps):
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
    steady = times[1:] if len(times) > 1 else times
    print("%.1f tokens/s" % (BATCH * SEQ / (sum(steady) / len(steady))))


def torch_versions():
    try:
        import torch
        import transformers
    except ImportError:
        return None
    return "torch %s, transformers %s" % (torch.__version__, transformers.__version__)


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
    ap.add_argument("--torch-worker", metavar="SIZE")
    a = ap.parse_args()
    if a.torch_worker:
        torch_worker(a.torch_worker, int(a.threads), a.steps or STEPS[a.torch_worker])
        return 0

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
    res = {(s, t, side): [] for s in sizes for t in threads for side in ("ftrain", other)}
    for rep in range(a.reps):
        for s in sizes:
            steps = a.steps or STEPS[s]
            for t in threads:
                # Alternate which side goes first, so neither always runs second.
                order = ("ftrain", other) if rep % 2 == 0 else (other, "ftrain")
                for side in order:
                    if side == "ftrain":
                        v = run_ftrain(a.ftrain, s, t, steps)
                    elif side == "baseline":
                        v = run_ftrain(a.baseline, s, t, steps)
                    else:
                        v = run_torch(s, t, steps)
                    res[(s, t, side)].append(v)
                    print("rep %d %-6s %d thread(s) %-8s %10.1f tokens/s" % (rep + 1, s, t, side, v), flush=True)

    head_other = "ftrain before (baseline)" if a.baseline else "PyTorch eager"
    lines = ["| model | params | threads | ftrain tokens/s | %s tokens/s | ratio |" % head_other,
             "|---|---|---|---|---|---|"]
    for s in sizes:
        p = params_of(a.ftrain, s)
        for t in threads:
            f, o = res[(s, t, "ftrain")], res[(s, t, other)]
            lines.append("| %s | %.1fM | %d | %s | %s | %.2f |" % (
                s, p / 1e6, t, fmt(f), fmt(o), statistics.median(f) / statistics.median(o)))
    load = os.getloadavg()
    lines.append("")
    # OpenBLAS honours OPENBLAS_CORETYPE from the environment over its own CPU
    # detection; PyTorch's CPU kernels do not read it. Say which was in force.
    core = os.environ.get("OPENBLAS_CORETYPE")
    lines.append("Medians of %d alternating runs (range min-max), batch %d x seq %d, %s; "
                 "OPENBLAS_CORETYPE %s; load average at the end %.1f (a shared machine). Measured %s." % (
                     a.reps, BATCH, SEQ, versions or "ftrain against its baseline binary",
                     "=" + core if core else "unset (OpenBLAS picks its kernels)", load[0],
                     time.strftime("%Y-%m-%d", time.gmtime())))
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
