#!/usr/bin/env python3
"""Times the host's side of DeepSpeed ZeRO-1/2's step() per decoder block on
the CPU, against the model's own forward and backward per ATen op, so that
the ops the step dispatches from its flat loops over the gradients
(has_inf_or_nan, the fp64 norms, the flattening, the bit16 copy and views)
are priced at what one of them costs the host relative to one of the model's
(estimator/frameworks/work_ds_host.c, docs/method.md "DeepSpeed's host work
per step").

    DS_ACCELERATOR=cpu python3 calibrate/host/time_ds_step.py [ROUNDS]

The tiny Llama of count_ds_host_ops.py (its ops cost microseconds, so the
time is the host's), 2 and 6 layers, one thread, the HF Trainer's two
parameter groups (decay, no decay: weight_decay 0.0) as the client torch
AdamW; each configuration runs once per round, interleaved, and the best of
the rounds is kept (the machine is shared). Per block: (6 layers - 2) / 4.
Op counts per block (count_ds_host_ops.py): the model's forward and backward
225, ZeRO-1/2's backward 108 more, ZeRO-1/2's step 198 (torch AdamW's own
foreach ops are per group, not per block, and drop out of the difference).

Measured 2026-11-26 (2 shared cores, load ~7, 100 rounds), torch 2.11.0,
transformers 5.17.0, DeepSpeed 0.19.8:
    model alone  1278 us per block (225 ops: 5.68 us per op)
    ZeRO-1 forward and backward 1804 us: 108 ops beyond the model's at 4.87 us (0.858)
    ZeRO-2 forward and backward 1983 us: 108 ops beyond the model's at 6.53 us (1.151)
    ZeRO-1 step  548 us per block (198 ops: 2.77 us per op, 0.487 of the model's)
    ZeRO-2 step  533 us per block (198 ops: 2.69 us per op, 0.474 of the model's)
Earlier runs with fewer rounds (the best of fewer rounds sits higher on a
loaded machine): 60 rounds 0.541 / 0.524, 40 rounds 0.836 / 0.754.
"""
import importlib.util
import os
import sys
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("time_ds_host", os.path.join(HERE, "time_ds_host.py"))
th = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(th)
count = th.count

MODEL_OPS_PER_BLOCK = 225  # forward 80 + backward 145 (count_ds_host_ops.py --plain)
STEP_OPS_PER_BLOCK = 198   # ZeRO-1/2 step() (count_ds_host_ops.py 1 and 2)
DS_BACKWARD_OPS_PER_BLOCK = 253 - 145  # ZeRO-1/2's hooks and copies in backward (the same)


def engine(stage, layers):
    import deepspeed
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29616"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}}
    model = transformers.AutoModelForCausalLM.from_config(count.config(layers))
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)
    eng, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    return eng


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    torch.set_num_threads(1)
    ids = torch.randint(0, 256, (1, 8))
    plain = {n: th.stepper(0, n, ids) for n in (2, 6)}
    engines = {(s, n): engine(s, n) for s in (1, 2) for n in (2, 6)}
    for eng in engines.values():
        for _ in range(3):
            eng.backward(eng(input_ids=ids, labels=ids).loss)
            eng.step()
    best = {key: float("inf") for key in list(plain) + list(engines)}
    for _ in range(rounds):
        for n, step in plain.items():
            t = time.perf_counter()
            step()
            best[n] = min(best[n], time.perf_counter() - t)
        for key, eng in engines.items():
            t = time.perf_counter()
            eng.backward(eng(input_ids=ids, labels=ids).loss)
            t1 = time.perf_counter()
            eng.step()
            best[key] = min(best[key], time.perf_counter() - t1)
            best[("fb",) + key] = min(best.get(("fb",) + key, float("inf")), t1 - t)
    model_us = (best[6] - best[2]) / 4 * 1e6
    print("model alone  %.0f us per block (%d ops: %.2f us per op)" %
          (model_us, MODEL_OPS_PER_BLOCK, model_us / MODEL_OPS_PER_BLOCK))
    per_model_op = model_us / MODEL_OPS_PER_BLOCK
    for s in (1, 2):
        fb = (best[("fb", s, 6)] - best[("fb", s, 2)]) / 4 * 1e6
        print("ZeRO-%d forward and backward %.0f us per block: %d ops beyond the model's, %.2f us per op, "
              "%.3f of the model's" % (s, fb, DS_BACKWARD_OPS_PER_BLOCK, (fb - model_us) / DS_BACKWARD_OPS_PER_BLOCK,
                                       (fb - model_us) / DS_BACKWARD_OPS_PER_BLOCK / per_model_op))
    for s in (1, 2):
        us = (best[(s, 6)] - best[(s, 2)]) / 4 * 1e6
        print("ZeRO-%d step %.0f us per block (%d ops: %.2f us per op, %.3f of the model's)" %
              (s, us, STEP_OPS_PER_BLOCK, us / STEP_OPS_PER_BLOCK,
               us / STEP_OPS_PER_BLOCK / (model_us / MODEL_OPS_PER_BLOCK)))


if __name__ == "__main__":
    main()
