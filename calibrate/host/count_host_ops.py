#!/usr/bin/env python3
"""Counts the host's work per decoder block of one training micro-batch, as the
real code does it, on the CPU: the ATen ops dispatched in forward (every op
TorchDispatchMode sees below autograd, views included), those the autograd
engine dispatches in backward, and the nn.Module calls of the forward (a
forward pre-hook on every module). Per block: a model of 3 layers less one of
2, so the embedding, final norm, LM head and loss drop out. The figures are
what tests/host_ops.c holds model/host_ops.c's counts against (docs/method.md,
"The host's work per step").

    python3 calibrate/host/count_host_ops.py   # torch, transformers, peft installed

Measured 2026-11-26 with torch 2.11.0+cu130 (on the CPU), transformers 5.17.0,
peft 0.21.2, under torch.autocast(bfloat16), SDPA:
    llama full        forward  92  backward 163  modules 13
    llama LoRA all    forward 185  backward 276  modules 41
    llama LoRA qv     forward 118  backward 159  modules 21
    qwen2 full        forward  95  backward 175  modules 13
    qwen2 LoRA all    forward 188  backward 276  modules 41
"""
import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

TARGETS = {"all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           "qv": ["q_proj", "v_proj"]}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def build(kind, layers, targets):
    cls = transformers.LlamaConfig if kind == "llama" else transformers.Qwen2Config
    cfg = cls(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if targets:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           target_modules=TARGETS[targets],
                                                           task_type="CAUSAL_LM"))
    return model


def measure(kind, layers, targets):
    model = build(kind, layers, targets)
    model.train()
    calls = [0]

    def pre_hook(*_):
        calls[0] += 1

    hooks = [m.register_forward_pre_hook(pre_hook) for m in model.modules()]
    ids = torch.randint(0, 256, (1, 32))
    fwd, bwd = Count(), Count()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with fwd:
            out = model(input_ids=ids, labels=ids)
    with bwd:
        out.loss.backward()
    for h in hooks:
        h.remove()
    return fwd.n, bwd.n, calls[0]


def main():
    for kind, targets in [("llama", ""), ("llama", "all"), ("llama", "qv"), ("qwen2", ""), ("qwen2", "all")]:
        two, three = measure(kind, 2, targets), measure(kind, 3, targets)
        f, b, m = (three[i] - two[i] for i in range(3))
        name = "%s %s" % (kind, "LoRA " + targets if targets else "full")
        print("%-18s forward %3d  backward %3d  modules %2d" % (name, f, b, m))


if __name__ == "__main__":
    main()
