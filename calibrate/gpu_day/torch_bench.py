#!/usr/bin/env python3
"""PyTorch's side of the day's benchmark (part c of docs/gpu-day.md): training
steps of Transformers' LlamaForCausalLM at ftrain's benchmark shape, eager or
under torch.compile, on the GPU. Writes one JSON object to --out.

The step: bf16 autocast over fp32 weights (the HF Trainer's bf16 path; ftrain
keeps bf16 weights and an fp32 master, the same matmuls), SDPA attention,
the mean loss of next-token prediction on random token ids, gradient norm
clipped to 1, fused AdamW (lr 1e-3, no weight decay), set_to_none. Timed with
CUDA synchronisation around each step; tokens/s = tokens per step / mean step
time after the warm-up steps (1 eager, 2 compiled: compilation falls in the
first, a recompile in the second). Needs torch and transformers (the GPU
machine's own); imports the probe's model builder (random weights drawn on
the GPU)."""

import argparse
import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "probes"))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama3.2-1b")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch
    import ftest_probe
    import probe_run
    warm = 2 if a.compile else 1
    if a.steps <= warm:
        p.error(f"--steps must exceed the {warm} warm-up step(s)")
    if not torch.cuda.is_available():
        print("torch_bench: no CUDA device", file=sys.stderr)
        return 2
    pa = types.SimpleNamespace(model=a.model, layers=0, attention="sdpa", smoke=False, mode="hf")
    hf_cfg = ftest_probe.model_config(pa)
    model = probe_run.build_model(pa, hf_cfg, "cuda")
    model.config.use_cache = False
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1337)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(a.steps):
        x = torch.randint(0, hf_cfg["vocab_size"], (a.batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    steady = times[warm:]
    out = {"tokens_per_s": a.batch * a.seq / (sum(steady) / len(steady)), "step_times_s": times,
           "warmup_steps": warm, "compiled": a.compile, "loss_last": float(loss),
           "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
           "torch": torch.__version__, "gpu_name": torch.cuda.get_device_name(0),
           "weights": "fp32 under bf16 autocast", "optimizer": "AdamW fused, clip 1.0"}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
