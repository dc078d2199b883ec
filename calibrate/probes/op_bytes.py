#!/usr/bin/env python3
"""Lists the ATen ops one Llama decoder layer runs, forward and backward, with
the bytes each reads (its tensor inputs as stored) and writes (its outputs):
the source of the per-kernel counts of docs/method.md, "Everything that is
not a GEMM". Runs on CPU (the op decomposition is the device's; only the
attention kernel differs on CUDA). Views are left out. Needs torch and
transformers (and peft for `lora`); the counts in ftest were read with torch
2.11 and transformers 5.17, peft 0.21.2:

    python3 calibrate/probes/op_bytes.py layer   # LlamaDecoderLayer under bf16 autocast
    python3 calibrate/probes/op_bytes.py norm    # LlamaRMSNorm, fp32 input
    python3 calibrate/probes/op_bytes.py lora    # a PEFT LoRA Linear over an fp32 input

Broadcast operands (cos/sin, rsqrt per row, a norm weight) are counted as
stored, so their bytes are small beside the per-element ones.
"""
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as ml

VIEWS = {"view", "_unsafe_view", "transpose", "t", "expand", "slice", "unsqueeze", "squeeze",
         "permute", "reshape", "as_strided", "select", "split", "detach", "alias",
         "split_with_sizes", "unbind"}


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in VIEWS:
            return out
        read = sum(a.untyped_storage().nbytes() for a in tree_leaves((args, kwargs))
                   if isinstance(a, torch.Tensor) and a.numel() > 1)
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        written = sum(o.numel() * o.element_size() for o in outs if o.numel() > 1)
        shape = tuple(outs[0].shape) if outs else ()
        dtype = str(outs[0].dtype)[6:] if outs else ""
        self.rows.append((name, read, written, shape, dtype))
        return out


def run(forward):
    """forward() under bf16 autocast, then backward of its output."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        log = Log()
        with log:
            y = forward()
        fwd = log.rows
    log = Log()
    g = torch.randn(y.shape, dtype=y.dtype)
    with log:
        y.backward(g)
    return fwd, log.rows


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "layer"
    h, f, T = 64, 256, 32
    x = torch.randn(1, T, h, requires_grad=True)
    if what == "layer":
        cfg = LlamaConfig(hidden_size=h, intermediate_size=f, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, num_hidden_layers=1,
                          vocab_size=128, attn_implementation="sdpa")
        layer = ml.LlamaDecoderLayer(cfg, 0).float()
        pos = torch.arange(T)[None]
        cos, sin = ml.LlamaRotaryEmbedding(cfg)(x, pos)
        fwd, bwd = run(lambda: layer(x, position_embeddings=(cos, sin), attention_mask=None,
                                     position_ids=pos))
    elif what == "norm":
        norm = ml.LlamaRMSNorm(h)
        fwd, bwd = run(lambda: norm(x * 1))
    elif what == "lora":
        from peft import LoraConfig, get_peft_model

        class One(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q_proj = torch.nn.Linear(h, h, bias=False)

            def forward(self, a):
                return self.q_proj(a)

        model = get_peft_model(One(), LoraConfig(r=8, target_modules=["q_proj"], lora_dropout=0.0))
        fwd, bwd = run(lambda: model(x * 1).float())
    else:
        sys.exit("usage: op_bytes.py layer|norm|lora")
    for tag, rows in (("forward", fwd), ("backward", bwd)):
        print(tag)
        for r in rows:
            print("  %-30s read %8d  written %8d  %s %s" % r)
        print("  total %d bytes, %d ops" % (sum(r[1] + r[2] for r in rows), len(rows)))


if __name__ == "__main__":
    main()
