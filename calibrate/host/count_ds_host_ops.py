#!/usr/bin/env python3
"""Counts the ATen ops DeepSpeed ZeRO dispatches per training step beyond the
model's own, on the CPU, as the real code does it, and where in the step the
host reads a tensor's value (`aten::_local_scalar_dense`: `.item()` or a
Python bool of a tensor; on a GPU those of device tensors are host syncs).
Per decoder block: a model of 3 layers less one of 2. The figures are what
estimator/frameworks/work_ds_host.c and tests/ds_host.c hold (docs/method.md,
"DeepSpeed's host work per step").

    DS_ACCELERATOR=cpu python3 calibrate/host/count_ds_host_ops.py STAGE
    # torch, transformers, deepspeed installed; STAGE 1, 2 or 3

Measured 2026-11-26 on the CPU with torch 2.11.0+cu130, transformers 5.17.0,
DeepSpeed 0.19.8 (its wheel), world size 1, bf16 (model and gradients), the
step at DeepSpeed's defaults; tiny Llama (hidden 64, GQA 4/2, 9 tensors per
block), third step:
    ZeRO-1/2  per block: forward 80 (the model's alone: 80), backward 253
              (the model's alone: 145), step 198; step ops between the
              value reads, 2 layers: 279 | 116 | 33 | 16 | 92 (reads in
              check_overflow, is_invalid_grad_norm in step and in
              unscale_and_clip_grads, then torch AdamW's step count, a host
              tensor on a GPU too); 3 layers: 396 | 152 | 42 | 16 | 128.
    ZeRO-3    per block: forward 119, backward 233, step 62.
The model's own counts come from the same model under plain autograd
(`--plain`).
"""
import collections
import os
import sys
import traceback

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::item", "aten::equal"}


class Count(TorchDispatchMode):
    def __init__(self, where=False):
        super().__init__()
        self.n, self.reads, self.names, self.where = 0, [], collections.Counter(), where

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        name = func._schema.name
        self.names[name] += 1
        if name in READS:
            self.reads.append(self.n)
            if self.where:
                frames = traceback.extract_stack()[-6:-1]
                print("  read at op %d: %s" % (self.n, " <- ".join(
                    "%s:%d" % (f.filename.split("site-packages/")[-1], f.lineno) for f in reversed(frames))))
        return func(*args, **(kwargs or {}))


def config(layers):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return cfg


def plain(layers):
    model = transformers.AutoModelForCausalLM.from_config(config(layers)).to(torch.bfloat16)
    ids = torch.randint(0, 256, (1, 32))
    for _ in range(2):
        f, b = Count(), Count()
        with f:
            out = model(input_ids=ids, labels=ids)
        with b:
            out.loss.backward()
        model.zero_grad(set_to_none=True)
    return [f.n, b.n], []


def zero(stage, layers, where=False):
    import deepspeed
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29613"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}}
    if stage == 3:  # the tiny block's matrices (>= 4096 elements) gathered, its norms kept
        ds["zero_optimization"]["stage3_param_persistence_threshold"] = 100
        with deepspeed.zero.Init(config_dict_or_path=ds):
            model = transformers.AutoModelForCausalLM.from_config(config(layers))
    else:
        model = transformers.AutoModelForCausalLM.from_config(config(layers))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    eng, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    ids = torch.randint(0, 256, (1, 32))
    for i in range(3):
        f, b, s = Count(), Count(), Count(where and i == 2)
        with f:
            out = eng(input_ids=ids, labels=ids)
        with b:
            eng.backward(out.loss)
        with s:
            eng.step()
    return [f.n, b.n, s.n], s.reads + [s.n]


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("1", "2", "3", "--plain"):
        sys.exit("usage: count_ds_host_ops.py 1|2|3|--plain")
    run = plain if sys.argv[1] == "--plain" else (lambda n: zero(int(sys.argv[1]), n, where=n == 2))
    (two, reads2), (three, reads3) = run(2), run(3)
    print("per block:", [b - a for a, b in zip(two, three)], "(forward, backward, step)")
    for name, reads in (("2 layers", reads2), ("3 layers", reads3)):
        if reads:
            print("step ops between value reads, %s:" % name,
                  [b - a for a, b in zip([0] + reads[:-1], reads)])


if __name__ == "__main__":
    main()
