#!/usr/bin/env python3
"""Measure the CPU optimizers of CPU offload on this host, for the host model of
docs/method.md ("The host"): DeepSpeedCPUAdam (DeepSpeed's cpu_adam op, built
here) and torch's AdamW on CPU tensors (for-loop, foreach, fused), fp32 states,
over N parameters in one flat tensor, with 1..T threads. Prints one JSON line
per (optimizer, threads): seconds per step (best of the repeats), parameters
per second, and the bytes per parameter each streams by its source.

    build/venv/bin/python calibrate/host/cpu_optim_bench.py --params 64e6 --threads 1,2

DeepSpeedCPUAdam.step (deepspeed/ops/adam/cpu_adam.py, csrc/adam/cpu_adam_impl.cpp
Step_AVX): per parameter reads p, g, m, v and writes p, m, v in fp32: 28 bytes.
torch AdamW for-loop/foreach (torch/optim/adamw.py _single/_multi_tensor_adamw):
one pass per elementwise op; fused (aten _fused_adamw_ on CPU, torch >= 2.4):
one pass, 28 bytes.
"""
import argparse
import json
import os
import sys
import time


def bench(step, repeats):
    step()  # warm-up: first-touch of the state
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best


def run(kind, n, threads, repeats):
    import torch
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.randn(n, dtype=torch.float32))
    p.grad = torch.randn(n, dtype=torch.float32) * 1e-3
    if kind == "deepspeed_cpu_adam":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([p], lr=1e-4, weight_decay=0.01, adamw_mode=True)
        per = 28
    else:
        flags = {"torch_adamw_forloop": dict(foreach=False),
                 "torch_adamw_foreach": dict(foreach=True),
                 "torch_adamw_fused": dict(fused=True)}[kind]
        opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, **flags)
        per = 28 if kind == "torch_adamw_fused" else None
    s = bench(opt.step, repeats)
    out = {"optimizer": kind, "threads": threads, "params": n, "step_s": round(s, 5),
           "params_per_s": round(n / s), "torch": torch.__version__}
    if per:
        out["bytes_per_param"] = per
        out["gb_per_s"] = round(per * n / s / 1e9, 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=64e6)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kinds", default="deepspeed_cpu_adam,torch_adamw_forloop,torch_adamw_foreach,"
                                       "torch_adamw_fused")
    a = ap.parse_args()
    for t in [int(x) for x in a.threads.split(",")]:
        for kind in a.kinds.split(","):
            print(json.dumps(run(kind, int(a.params), t, a.repeats)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
