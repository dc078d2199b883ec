#!/usr/bin/env python3
"""Gradient parity of ftrain with Hugging Face Transformers (issue 14).

For each model below: a transformers.LlamaForCausalLM with random weights
(fp32, CPU) is saved as safetensors under its own parameter names; ftrain
trains one step from that file (--init) on the same tokens (--data, a
FTRAINTK token file written here) and writes the step's gradients
(--dump-grads). PyTorch computes the gradient of the same loss: the mean
cross-entropy over every token of the step's sequences, taken exactly as
ftrain samples them (docs/trainer.md, "Data": sample g is the window of T+1
tokens starting at (g*T) mod (count - T); inputs its first T tokens, targets
its last T). Every parameter's gradient must agree within a relative L2 error
of 1e-5, ||g_ftrain - g_torch|| / ||g_torch||, and so must the loss (ftrain's
loss_first from its record). The set of tensor names must be the same on both
sides.

The figure also given against PyTorch in float64 says which side the
remaining difference comes from (both fp32 sides sit at about fp32 rounding
from the float64 gradient).

Without PyTorch and Transformers it prints one line saying how to enable it
and exits 0 (CI has no PyTorch).

    python3 tests/torch/grad_parity.py --ftrain build/ftrain
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = 1e-5

# (config file, batch, grad-accum, seq, what it covers)
MODELS = [
    ("tests/bench/models/bench-tiny.json", 2, 2, 32, "MHA 4/4, untied, h128 L2 V512"),
    ("tests/bench/models/bench-small.json", 2, 1, 64, "GQA 8/4, untied, h256 L7 V8192"),
    ("models/tiny-llama-bias.json", 2, 2, 24, "GQA 4/2, head_dim 8 != h/nh, q/k/v/o and MLP biases, untied"),
    ("models/tiny-llama-tied.json", 3, 1, 16, "tied embeddings"),
]


def skip_line():
    py = sys.executable
    return ("test-torch: skipped: PyTorch and Transformers are not importable by %s; to enable: "
            "%s -m venv build/torch-venv && build/torch-venv/bin/pip install torch transformers && "
            "make test-torch PYTHON=build/torch-venv/bin/python" % (py, py))


def hf_config(path):
    import transformers
    with open(os.path.join(ROOT, path)) as f:
        cfg = json.load(f)
    cfg = {k: v for k, v in cfg.items() if k not in ("ftest", "architectures")}
    return transformers.LlamaConfig(**cfg)


def random_model(config, seed):
    """LlamaForCausalLM in fp32 with weights far from the default init, so that
    every path carries signal: 2-D weights N(0, 1/fan_in), norm weights
    1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    import torch
    import transformers
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model


def write_tokens(path, tokens):
    with open(path, "wb") as f:
        f.write(b"FTRAINTK" + struct.pack("<II", 1, 4))
        f.write(struct.pack("<%dI" % len(tokens), *tokens))


def samples(tokens, n, T):
    """ftrain's samples 0..n-1 of a token file (trainer/data.h)."""
    count = len(tokens)
    xs, ys = [], []
    for g in range(n):
        s = (g * T) % (count - T)
        xs.append(tokens[s:s + T])
        ys.append(tokens[s + 1:s + T + 1])
    return xs, ys


def torch_grads(model, xs, ys, dtype):
    import torch
    import torch.nn.functional as F
    m = model.to(dtype)
    m.zero_grad(set_to_none=True)
    ids, tgt = torch.tensor(xs), torch.tensor(ys)
    logits = m(input_ids=ids).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in m.named_parameters()}


def rel_l2(a, b):
    import torch
    a, b = a.double(), b.double()
    den = torch.linalg.vector_norm(b)
    return float(torch.linalg.vector_norm(a - b) / den) if den > 0 else float(torch.linalg.vector_norm(a))


def check_model(ftrain, path, B, A, T, what, tmp, seed):
    import torch
    from safetensors.torch import load_file, save_file
    config = hf_config(path)
    model = random_model(config, seed)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    state = {n: p.detach().contiguous() for n, p in model.named_parameters()}
    if tied:
        state.pop("lm_head.weight", None)  # one parameter under two names; ftrain reads the embedding
    init, data, dump, rec = (os.path.join(tmp, x) for x in ("init.safetensors", "data.tok", "grads.safetensors",
                                                             "record.jsonl"))
    save_file(state, init)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab_size, (A * B * T + 1,), generator=gen).tolist()
    write_tokens(data, tokens)
    cmd = [ftrain, "--model", os.path.join(ROOT, path), "--init", init, "--data", data, "--seq", str(T),
           "--batch", str(B), "--grad-accum", str(A), "--steps", "1", "--threads", "1", "--dump-grads", dump,
           "--record", rec, "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print("test-torch: FAIL: %s exited %d: %s" % (" ".join(cmd), out.returncode, out.stderr.strip()))
        return False, None
    with open(rec) as f:
        loss_ftrain = json.loads(f.readlines()[-1])["measured"]["loss_first"]
    ours = load_file(dump)
    xs, ys = samples(tokens, A * B, T)
    loss32, g32 = torch_grads(model, xs, ys, torch.float32)
    loss64, g64 = torch_grads(model, xs, ys, torch.float64)
    ok = True
    if set(ours) != set(g32):
        print("test-torch: FAIL %s: tensor names differ: only ftrain %s, only torch %s" % (
            path, sorted(set(ours) - set(g32))[:5], sorted(set(g32) - set(ours))[:5]))
        return False, None
    worst = max(((rel_l2(ours[n], g32[n]), n) for n in g32))
    worst64 = max(rel_l2(ours[n], g64[n]) for n in g64)
    torch32_vs_64 = max(rel_l2(g32[n], g64[n]) for n in g64)
    bad = [(n, rel_l2(ours[n], g32[n])) for n in g32 if not rel_l2(ours[n], g32[n]) <= TOL]
    loss_err = abs(loss_ftrain - loss32) / abs(loss32)
    if bad or not loss_err <= TOL:
        ok = False
        for n, e in bad[:10]:
            print("test-torch: FAIL %s: %s relative L2 %.3g > %g" % (path, n, e, TOL))
        if not loss_err <= TOL:
            print("test-torch: FAIL %s: loss ftrain %.9g, torch %.9g (relative %.3g)" % (path, loss_ftrain, loss32,
                                                                                        loss_err))
    print("test-torch: %s %s (%s): %d tensors, B %d x A %d x T %d; max relative L2 %.2e (%s); loss %.7f vs %.7f "
          "(relative %.1e); against float64: ftrain %.1e, torch fp32 %.1e" % (
              "ok" if ok else "FAIL", os.path.basename(path), what, len(g32), B, A, T, worst[0], worst[1],
              loss_ftrain, loss32, loss_err, worst64, torch32_vs_64))
    return ok, worst[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftrain", default=os.path.join(ROOT, "build", "ftrain"))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    try:
        import safetensors.torch  # noqa: F401  (comes with transformers)
        import torch
        import transformers
    except ImportError:
        print(skip_line())
        return 0
    torch.set_num_threads(1)
    print("test-torch: torch %s, transformers %s, %s" % (torch.__version__, transformers.__version__,
                                                         os.path.abspath(a.ftrain)))
    ok = True
    with tempfile.TemporaryDirectory(prefix="ftest-torch-") as tmp:
        for i, (path, B, A, T, what) in enumerate(MODELS):
            good, _ = check_model(os.path.abspath(a.ftrain), path, B, A, T, what, tmp, a.seed + i)
            ok = ok and good
    print("test-torch: %s" % ("all models within %g" % TOL if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
