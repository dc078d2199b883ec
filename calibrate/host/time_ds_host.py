#!/usr/bin/env python3
"""Times the host's side of one forward and backward per decoder block on the
CPU, for the model alone and under DeepSpeed ZeRO-2 and ZeRO-3, so that
ZeRO-3's hook Python that dispatches no ATen op (fetch_sub_module's trace and
status sets, release_sub_module, the torch.compiler.disable wrappers) can be
stated as the ops whose host time it takes (estimator/frameworks/
work_ds_host.c, docs/method.md "DeepSpeed's host work per step").

    DS_ACCELERATOR=cpu python3 calibrate/host/time_ds_host.py [ROUNDS]

The tiny Llama of count_ds_host_ops.py (its ops cost microseconds, so the
time is the host's), 2 and 6 layers, one thread; each configuration runs
once per round, interleaved, and the best of the rounds is kept (the
machine is shared). Per block: (6 layers - 2 layers) / 4.

Measured 2026-11-26 (2 shared cores, load ~4.6, 80 rounds), torch 2.11.0,
transformers 5.17.0, DeepSpeed 0.19.8:
    model alone 1805 us per block (225 ops: 8.02 us per op)
    ZeRO-2      2388 us (333 ops)
    ZeRO-3      5677 us (352 ops): 5677 - 352 x 8.02 = 2853 us beyond its
                ops = 356 ops' worth per block, over 13 module calls and
                2 passes (forward, backward): 13.7 per call and pass.
"""
import importlib.util
import os
import sys
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("count_ds_host_ops", os.path.join(HERE, "count_ds_host_ops.py"))
count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(count)


def engine(stage, layers):
    import deepspeed
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29615"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}}
    if stage == 3:
        ds["zero_optimization"]["stage3_param_persistence_threshold"] = 100
        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = transformers.AutoModelForCausalLM.from_config(count.config(layers))
    else:
        model = transformers.AutoModelForCausalLM.from_config(count.config(layers))
    eng, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                        config=ds)
    return eng


def stepper(stage, layers, ids):
    if stage == 0:
        model = transformers.AutoModelForCausalLM.from_config(count.config(layers)).to(torch.bfloat16)

        def step():
            model(input_ids=ids, labels=ids).loss.backward()
            model.zero_grad(set_to_none=True)
    else:
        eng = engine(stage, layers)

        def step():
            eng.backward(eng(input_ids=ids, labels=ids).loss)
    for _ in range(3):
        step()
    return step


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    torch.set_num_threads(1)
    ids = torch.randint(0, 256, (1, 8))
    steps = {(s, n): stepper(s, n, ids) for s in (0, 2, 3) for n in (2, 6)}
    best = {key: float("inf") for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            t = time.perf_counter()
            step()
            best[key] = min(best[key], time.perf_counter() - t)
    for s, name in ((0, "model alone"), (2, "ZeRO-2"), (3, "ZeRO-3")):
        print("%-12s %.0f us per block (forward and backward)" % (name, (best[(s, 6)] - best[(s, 2)]) / 4 * 1e6))


if __name__ == "__main__":
    main()
