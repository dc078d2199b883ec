#!/usr/bin/env python3
"""Counts and times the host's side of a training step per decoder block on
the CPU for the model alone, FSDP1 and FSDP2, wrapped as ftest's probe wraps
them (calibrate/probes/probe_run.py fsdp1_wrap / fsdp2_wrap: one unit per
decoder layer and the root; bf16 weights; FSDP1 MixedPrecision(bf16, bf16,
bf16), FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32);
torch AdamW at its defaults), world size 1 (gloo), so that what FSDP2's
per-parameter machinery costs the host beyond its ATen ops can be stated as
the ops whose host time it takes (estimator/frameworks/work_fsdp2.c,
docs/method.md "FSDP2's step beyond FSDP1").

    python3 calibrate/host/time_fsdp_host.py [ROUNDS]

The tiny Llama of count_ds_host_ops.py (hidden 64, 9 tensors per block: its
ops cost microseconds, so the time is the host's), 2 and 6 layers, one
thread; ops counted with a TorchDispatchMode (a DTensor op counts once, as
its Python dispatch is what it costs), per block = (3 layers - 2 layers);
time per block = (6 layers - 2 layers) / 4, the best of ROUNDS interleaved
rounds (the machine is shared). Forward + backward, and the optimizer step
(with zero_grad) apart.

Measured 2026-11-26 (2 shared cores, 80 rounds), torch 2.11.0, transformers
5.17.0; ops per block (forward+backward, step): plain 225, 18; FSDP1 261, 2;
FSDP2 275, 18. Time per block (forward, backward, step), FSDP1's gloo
all-reduce taken out:
    plain  558 | 739 | 251 us (5.76 us per op)
    FSDP1  857 | 997 | 105 us
    FSDP2  974 | 1357 | 494 us
FSDP2 beyond FSDP1: 20 ops' time in forward, 63 in backward; its step beyond
plain tensors' 42 (a second run: 21, 66, 43).
"""
import importlib.util
import os
import sys
import time

import torch
import torch.distributed as dist
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("count_ds_host_ops", os.path.join(HERE, "count_ds_host_ops.py"))
count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(count)


class _Done:
    def wait(self):
        return True


def _no_all_reduce(*args, **kwargs):
    return _Done() if kwargs.get("async_op") else None


def build(mode, layers):
    model = transformers.AutoModelForCausalLM.from_config(count.config(layers)).to(torch.bfloat16)
    dt = torch.bfloat16
    if mode == "fsdp1":
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        cls = type(model.model.layers[0])
        model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, mixed_precision=MixedPrecision(dt, dt, dt),
                     device_id=torch.device("cpu"),
                     auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={cls}))
    elif mode == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (1,))
        mp = MixedPrecisionPolicy(param_dtype=dt, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=True, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=True, mp_policy=mp)
    # foreach, as torch picks it on CUDA for tensors and DTensors alike
    # (optim/optimizer.py _default_to_fused_or_foreach; distributed/tensor/
    # __init__.py adds DTensor to _foreach_supported_types); the CPU default is
    # the per-tensor loop
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    return model, opt


def phases(model, opt, ids):
    box = {}

    def fwd():
        box["loss"] = model(input_ids=ids, labels=ids).loss

    def bwd():
        box.pop("loss").backward()

    def fwd_bwd():
        fwd()
        bwd()

    def step():
        opt.step()
        opt.zero_grad(set_to_none=True)
    return fwd_bwd, step, fwd, bwd


def counts(mode, layers, ids):
    model, opt = build(mode, layers)
    fb, st, _, _ = phases(model, opt, ids)
    for _ in range(3):
        fb()
        st()
    a, b = count.Count(), count.Count()
    with a:
        fb()
    with b:
        st()
    return a.n, b.n, a.names, b.names


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29617")):
        os.environ.setdefault(k, v)
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    ids = torch.randint(0, 256, (1, 8))
    modes = ("plain", "fsdp1", "fsdp2")
    res, plain_ops = {}, 0
    for mode in modes:
        f2, s2, n2f, n2s = counts(mode, 2, ids)
        f3, s3, n3f, n3s = counts(mode, 3, ids)
        print("%-6s ops per block: forward+backward %d, step %d" % (mode, f3 - f2, s3 - s2))
        plain_ops = plain_ops or f3 - f2
        if "-v" in os.environ.get("FTEST_VERBOSE", ""):
            print("   ", {k: n3f[k] - n2f[k] for k in n3f if n3f[k] != n2f[k]})
            print("   ", {k: n3s[k] - n2s[k] for k in n3s if n3s[k] != n2s[k]})
    # Timed without FSDP1's all-reduce: at world 1 it runs through gloo's worker
    # thread here, a single NCCL launch on a GPU (its op is in the count above).
    import torch.distributed.fsdp._runtime_utils as runtime_utils
    runtime_utils.dist.all_reduce = _no_all_reduce
    runs = {}
    for mode in modes:
        for n in (2, 6):
            model, opt = build(mode, n)
            fb, st, f, b = phases(model, opt, ids)
            for _ in range(3):
                fb()
                st()
            runs[(mode, n)] = (f, b, st)
    best = {(key, p): float("inf") for key in runs for p in (0, 1, 2)}
    for _ in range(rounds):
        for key, fns in runs.items():
            for p in (0, 1, 2):
                t = time.perf_counter()
                fns[p]()
                best[(key, p)] = min(best[(key, p)], time.perf_counter() - t)
    for mode in modes:
        per = [(best[((mode, 6), p)] - best[((mode, 2), p)]) / 4 * 1e6 for p in (0, 1, 2)]
        print("%-6s us per block: forward %.0f, backward %.0f, step %.0f" % (mode, per[0], per[1], per[2]))
        res[mode] = per
    op_us = (res["plain"][0] + res["plain"][1]) / plain_ops
    print("plain: %.2f us per op" % op_us)
    print("fsdp2 beyond fsdp1, per block in ops: forward %.0f, backward %.0f; step beyond plain %.0f" % (
        (res["fsdp2"][0] - res["fsdp1"][0]) / op_us, (res["fsdp2"][1] - res["fsdp1"][1]) / op_us,
        (res["fsdp2"][2] - res["plain"][2]) / op_us))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
