"""The GPU day's plan: every point it may run, in priority order, each with
an estimated cost in device seconds (docs/gpu-day.md).

A point is one unit of work that leaves one record or one result: a probe run
(many per Python process, grouped by the process they can share), an ftrain
run, or a check (op parity, gradient parity, a learning run, a benchmark).
Jobs group points for the manifest; groups are the probe processes.

The costs are leads: a small model written out below (process start-up, model
build, framework set-up, steps at an assumed share of the H100's measured bf16
rate), scaled per probe group by what the first GPU day (2026-11-26, one H200,
calibrate/gpu-days/2026-11-26-h200) measured against it, and the driver
corrects them as it goes (each group's remaining estimates are scaled by
what its finished points took against their estimates), so a wrong lead costs
accuracy of the packing, not the day. The manifest keeps estimate and actual
of every point, so the next day's leads can come from this one's figures.

Pure functions of the repository's model configs: no GPU, no torch."""

import json
import math
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# --- the cost model (device seconds) ---------------------------------------
# bf16 dense rate reached by a training step of these shapes: KINDS.md's
# 798 TFLOP/s (an 8192^3 bf16 product on the lent H100, random data) times a
# guessed 35% for a whole step of 1B-class shapes with its non-matmul work.
STEP_FLOPS_PER_S = 798e12 * 0.35
HOST_COPY_BYTES_PER_S = 12e9     # pinned host <-> device, a guess under PCIe 5's 64 GB/s
HOST_ADAM_PARAMS_PER_S = 0.4e9   # torch AdamW on host fp32 partitions, 16 cores (a guess)
STEP_OVERHEAD_S = {"hf": 0.05, "deepspeed": 0.08, "fsdp": 0.06}  # Python and hooks per step
SETUP_S = {"hf": 1.5, "deepspeed": 3.0, "fsdp": 1.5}             # Trainer / engine / wrap set-up
BUILD_PARAMS_PER_S = 2e9         # random weights drawn on the GPU (probe_run.fill_random)
QLORA_SAVE_BYTES_PER_S = 1.0e9   # save_pretrained + quantized reload through /tmp
# Import of torch + transformers (+ DeepSpeed, + Liger's Triton), CUDA context,
# NCCL or the fake group. Measured on 2026-11-26 (state.jsonl, calls 1-7: from
# the end of the previous point to the first point-start of a fresh probe
# process, the medians): HF Trainer 14.0 s (3 starts, 13.0 - 16.8), DeepSpeed
# 14.6 s (21 starts, 12.6 - 16.6), FSDP 16.4 s (27 starts, 13.0 - 20.8), Liger
# 18.2 s (one start: HF's and Triton's).
PROCESS_START_S = {"hf": 14.0, "deepspeed": 14.6, "fsdp": 16.4, "liger": 18.2}

MEASURED_STEPS = ["--steps", "5", "--warmup", "2"]   # median of 3 timed steps
EMULATED_STEPS = ["--steps", "2", "--warmup", "1"]   # step 2 holds the optimizer state


def load_model(name):
    with open(os.path.join(ROOT, "models", name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def param_count(name, layers=0, vocab=None):
    """Parameters of a shipped Llama/Qwen2-family model truncated to `layers`
    blocks: embeddings (and an untied head), per block the attention and MLP
    projections (biases where the config has them) and two norms, the final norm."""
    c = load_model(name)
    h, inter, v = c["hidden_size"], c["intermediate_size"], vocab or c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or h // nh
    q, kv = nh * hd, nkv * hd
    L = min(layers or c["num_hidden_layers"], c["num_hidden_layers"])
    qkv_bias = (q + 2 * kv) if (c.get("attention_bias") or c["model_type"] == "qwen2") else 0
    block = h * (q + 2 * kv) + q * h + qkv_bias + 3 * h * inter + 2 * h
    emb = v * h * (1 if c.get("tie_word_embeddings") else 2)
    return emb + L * block + h


def step_flops(name, layers, tokens, ckpt, vocab=None):
    """6 N per token for the matmul weights (8 N with full recomputation),
    N without the embedding lookup (DESIGN.md, "The physics")."""
    c = load_model(name)
    n = param_count(name, layers, vocab) - (vocab or c["vocab_size"]) * c["hidden_size"] * (
        0 if c.get("tie_word_embeddings") else 1)
    return (8 if ckpt else 6) * n * tokens


def probe_cost(model, layers, seq, batch, steps, family, ckpt=False, offload=False, world=1,
               qlora=False, trainable_share=1.0):
    """Estimated seconds of one probe run (set-up, model build, steps)."""
    n = param_count(model, layers)
    step = step_flops(model, layers, seq * batch, ckpt) / STEP_FLOPS_PER_S
    step *= 1.0 if trainable_share >= 1.0 else 0.7  # frozen weights skip their weight gradients
    step += STEP_OVERHEAD_S[family]
    if offload:
        step += 16 * n / world / HOST_COPY_BYTES_PER_S + n / world / HOST_ADAM_PARAMS_PER_S
    build = n / BUILD_PARAMS_PER_S + (4 * n / QLORA_SAVE_BYTES_PER_S if qlora else 0.0)
    return SETUP_S[family] + build + steps * step


def _steps(world):
    return EMULATED_STEPS if world > 1 else MEASURED_STEPS


# What each probe group's points took on 2026-11-26 against the leads of the
# model above (points that ended ok; sums of state.jsonl's point-end elapsed_s
# and of the model's leads): (points, leads s, measured s). Calls 1-2 (git
# f98e336): the HF Trainer and PEFT runs were faster than the model (steps at
# more than 35% of the bf16 rate), single-GPU DeepSpeed and FSDP slower (engine
# and wrap set-up). Calls 5-7 (git 1e8b0c0): Liger, expandable segments, FSDP
# and ZeRO-3 as ranks of 8; each of their rank-emulated points ran first in a
# fresh process (the memory a run left allocated, freed since by
# probe_run.release), so these ratios hold a process's first CUDA allocations
# too: leads on the slow side. A group that finished no point takes its
# sibling's ratio.
DAY_2026_11_26 = {"hf-w1": (24, 65.8, 31.7), "ds-w8-r0": (12, 55.6, 49.5), "peft-w1": (15, 73.2, 51.5),
                  "ds-w1": (6, 25.2, 37.1), "fsdp-w1": (10, 26.8, 52.9), "ds-w8-r7": (3, 13.4, 10.0),
                  "liger-w1": (5, 13.6, 11.6), "hf-w1-es": (8, 20.3, 11.0), "ds-w8-r0-es": (5, 21.8, 10.8),
                  "fsdp-w8-r0": (9, 24.3, 59.7), "fsdp-w8-r7": (9, 24.3, 64.5)}
DAY_SIBLING = {}


def day_ratio(group):
    """Measured over lead for a probe group's points on 2026-11-26."""
    _, lead, measured = DAY_2026_11_26[DAY_SIBLING.get(group, group)]
    return measured / lead


def probe_point(job, group, mode, model, seq, batch=1, layers=0, world=1, rank=0, extra=(),
                family=None, needs=()):
    """One probe run as a plan point. `extra` holds the mode's own flags."""
    extra = list(extra)
    family = family or {"deepspeed": "deepspeed", "fsdp": "fsdp", "fsdp2": "fsdp"}.get(mode, "hf")
    args = ["--mode", mode, "--model", model, "--seq", str(seq), "--batch", str(batch)]
    if layers:
        args += ["--layers", str(layers)]
    args += extra + _steps(world)
    tags = [mode, model + (f"-L{layers}" if layers else ""), f"s{seq}", f"b{batch}"] + flag_tags(extra)
    ident = "probe/" + group + "/" + "/".join(tags)
    est = probe_cost(model, layers, seq, batch, int(_steps(world)[1]), family,
                     ckpt="full" in extra, offload="optimizer" in extra, world=world,
                     qlora=mode == "qlora", trainable_share=0.0 if mode in ("lora", "qlora") else 1.0)
    est *= day_ratio(group)
    return {"id": ident, "job": job, "kind": "probe", "group": group, "world": world, "rank": rank,
            "args": args, "est_s": round(est, 2), "needs": list(needs) or _needs(mode, extra)}


def flag_tags(extra):
    """--zero 3 --no-zero-init -> ["zero=3", "no-zero-init"] (commas dropped)."""
    tags, i = [], 0
    while i < len(extra):
        flag = extra[i].lstrip("-")
        if i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            tags.append(f"{flag}={extra[i + 1].replace(',', '')}")
            i += 2
        else:
            tags.append(flag)
            i += 1
    return tags


def _needs(mode, extra):
    needs = ["torch", "transformers"]
    if mode == "deepspeed":
        needs.append("deepspeed")
    if mode in ("lora", "qlora"):
        needs.append("peft")
    if mode in ("qlora", "adam8bit") or any("8bit" in x for x in extra):
        needs.append("bitsandbytes")
    if "chunked" in extra:
        needs.append("liger_kernel")
    return needs


def tiered(points, core):
    """The first `core` points are tier 1 (run before the ftrain checks and the
    benchmark), the rest tier 2 (after them): each part of the day gets its
    core before any part gets its extensions."""
    for i, p in enumerate(points):
        p["tier"] = 1 if i < core else 2
    return points


def _seq_sweep(job, group, mode, model, seqs, **kw):
    return [probe_point(job, group, mode, model, s, **kw) for s in seqs]


# --- a. framework ground truth (the probe) ----------------------------------

def probe_hf():
    """HF Trainer + PyTorch on one real rank (DDP's one-rank path): sequence
    and batch sweeps, recomputation, eager attention, precisions, optimizers."""
    j, g, m = "probe-hf", "hf-w1", "llama3.2-1b"
    pts = _seq_sweep(j, g, "hf", m, (512, 1024, 2048, 4096, 8192))
    pts += [probe_point(j, g, "hf", m, 1024, b) for b in (2, 4, 8)]
    pts += [probe_point(j, g, "hf", m, 2048, b) for b in (2, 4)]
    pts += [probe_point(j, g, "hf", m, 512, 16), probe_point(j, g, "hf", m, 16384)]
    pts += [probe_point(j, g, "hf", m, 1024, 1, extra=["--grad-accum", "4"])]
    pts += _seq_sweep(j, g, "hf", m, (512, 1024, 2048), extra=["--attention", "eager"])
    pts += [probe_point(j, g, "hf", m, 1024, extra=["--precision", p]) for p in ("fp16-mixed", "fp32")]
    pts += [probe_point(j, g, "hf", m, 1024, extra=["--optimizer", o]) for o in ("adafactor", "sgd")]
    q = "qwen2.5-0.5b"  # a 152K vocabulary: the logits' share of the slope
    pts += _seq_sweep(j, g, "hf", q, (512, 1024, 2048, 4096, 8192))
    pts += [probe_point(j, g, "hf", q, 1024, b) for b in (2, 4, 8)]
    pts += [probe_point(j, g, "hf", "qwen1.5-0.5b", 2048)]
    pts += [probe_point(j, g, "hf", "tinyllama-1.1b", s) for s in (1024, 2048)]
    pts += [probe_point(j, g, "hf", "llama3.2-3b", 1024)]
    # Full recomputation last: the Trainer enables it on the model it is given.
    pts += _seq_sweep(j, g, "hf", m, (2048, 8192), extra=["--checkpointing", "full"])
    pts += [probe_point(j, g, "hf", m, 2048, 4, extra=["--checkpointing", "full"]),
            probe_point(j, g, "hf", q, 8192, extra=["--checkpointing", "full"])]
    return tiered(pts, 24)


def probe_ds8():
    """DeepSpeed ZeRO as ranks 0 and 7 of 8 on one GPU (fake process group):
    llama3-8b at 4 blocks, the README's main job at reduced depth."""
    pts = []
    for r in (0, 7):
        g, j, kw = f"ds-w8-r{r}", "probe-ds8", dict(layers=4, world=8, rank=r)
        m = "llama3-8b"
        pts += _seq_sweep(j, g, "deepspeed", m, (1024, 2048, 4096, 8192), extra=["--zero", "3"], **kw)
        pts += [probe_point(j, g, "deepspeed", m, 2048, 2, extra=["--zero", "3"], **kw),
                probe_point(j, g, "deepspeed", m, 1024, 4, extra=["--zero", "3"], **kw)]
        pts += _seq_sweep(j, g, "deepspeed", m, (1024, 2048, 4096), extra=["--zero", "3", "--no-zero-init"], **kw)
        pts += [probe_point(j, g, "deepspeed", m, 4096, extra=["--zero", "3", "--checkpointing", "full"], **kw)]
        pts += [probe_point(j, g, "deepspeed", m, 2048, extra=["--zero", z, "--offload", "optimizer"], **kw)
                for z in ("2", "3")]
        pts += [probe_point(j, g, "deepspeed", m, s, extra=["--zero", z], **kw)
                for z in ("1", "2") for s in (1024, 2048, 4096)]
        tiered(pts[-18:], 12)
    return pts


def probe_peft():
    """PEFT LoRA, QLoRA (bitsandbytes NF4, with and without double
    quantization, and int8) and 8-bit Adam on one rank."""
    j, g, m = "probe-peft", "peft-w1", "llama3.2-1b"
    pts = _seq_sweep(j, g, "lora", m, (1024, 2048, 4096, 8192))
    pts += [probe_point(j, g, "lora", m, 2048, extra=["--lora-r", "64"]),
            probe_point(j, g, "lora", m, 2048, extra=["--lora-r", "8", "--lora-targets", "q,v"]),
            probe_point(j, g, "lora", m, 2048, 4),
            probe_point(j, g, "lora", "llama3-8b", 1024, extra=["--lora-r", "16"]),
            probe_point(j, g, "lora", "qwen2.5-0.5b", 2048)]
    pts += _seq_sweep(j, g, "qlora", m, (1024, 2048, 4096))
    pts += [probe_point(j, g, "qlora", m, 2048, extra=["--double-quant"]),
            probe_point(j, g, "qlora", m, 2048, 4),
            probe_point(j, g, "qlora", m, 2048, extra=["--quant", "int8"]),
            probe_point(j, g, "qlora", "qwen2.5-0.5b", 2048)]
    pts += _seq_sweep(j, g, "adam8bit", m, (1024, 2048))
    pts += [probe_point(j, g, "adam8bit", m, 1024, 4)]
    pts += [probe_point(j, g, "adam8bit", "qwen2.5-0.5b", 1024)]
    pts += [probe_point(j, g, "lora", m, 4096, extra=["--checkpointing", "full"]),
            probe_point(j, g, "qlora", m, 4096, extra=["--checkpointing", "full"])]
    return tiered(pts, 15)


def probe_ds1():
    """DeepSpeed ZeRO 1-3 on one real rank (with step times)."""
    j, g, m = "probe-ds1", "ds-w1", "llama3.2-1b"
    pts = [probe_point(j, g, "deepspeed", m, 1024, extra=["--zero", z]) for z in ("1", "2", "3")]
    pts += [probe_point(j, g, "deepspeed", m, 1024, extra=["--zero", "3", "--no-zero-init"])]
    pts += [probe_point(j, g, "deepspeed", m, 2048, extra=["--zero", z]) for z in ("2", "3")]
    pts += [probe_point(j, g, "deepspeed", m, 1024, 4, extra=["--zero", "3"])]
    pts += [probe_point(j, g, "deepspeed", m, 1024, extra=["--zero", "3", "--offload", "optimizer"])]
    pts += [probe_point(j, g, "deepspeed", m, 4096, extra=["--zero", "3", "--checkpointing", "full"])]
    return tiered(pts, 6)


def _fsdp_set(j, g, m, **kw):
    pts = [probe_point(j, g, "fsdp", m, s, extra=["--zero", "3"], **kw) for s in (1024, 2048, 4096)]
    pts += [probe_point(j, g, "fsdp", m, s, extra=["--zero", "2"], **kw) for s in (1024, 2048)]
    pts += [
            probe_point(j, g, "fsdp", m, 2048, extra=["--zero", "3", "--fsdp-backward-prefetch", "post"], **kw),
            probe_point(j, g, "fsdp", m, 2048, extra=["--zero", "3", "--fsdp-backward-prefetch", "none"], **kw),
            probe_point(j, g, "fsdp", m, 2048, extra=["--zero", "3", "--fsdp-forward-prefetch"], **kw)]
    pts += [probe_point(j, g, "fsdp2", m, s, extra=["--zero", "3"], **kw) for s in (1024, 2048)]
    pts += [probe_point(j, g, "fsdp2", m, s, extra=["--zero", "2"], **kw) for s in (1024, 2048)]
    pts += [
            probe_point(j, g, "fsdp2", m, 2048, extra=["--zero", "3", "--fsdp2-prefetch", "2"], **kw),
            probe_point(j, g, "fsdp2", m, 4096, extra=["--zero", "3", "--checkpointing", "full"], **kw)]
    return tiered(pts, 9)


def probe_fsdp1():
    """FSDP1 and FSDP2 on one real rank (NCCL with one member)."""
    pts = _fsdp_set("probe-fsdp1", "fsdp-w1", "llama3.2-1b")
    return tiered(pts, 10)


def probe_fsdp8():
    """FSDP1 and FSDP2 as ranks 0 and 7 of 8 (fake process group), llama3-8b at 4 blocks."""
    return [p for r in (0, 7)
            for p in _fsdp_set("probe-fsdp8", f"fsdp-w8-r{r}", "llama3-8b", layers=4, world=8, rank=r)]


def probe_liger():
    """The chunked loss (Liger's fused linear cross-entropy), in a process of
    its own: Liger patches the model classes for the rest of the process."""
    j, g = "probe-liger", "liger-w1"
    pts = _seq_sweep(j, g, "hf", "llama3.2-1b", (1024, 2048, 4096, 8192), extra=["--loss", "chunked"])
    pts += _seq_sweep(j, g, "hf", "qwen2.5-0.5b", (2048, 4096, 8192), extra=["--loss", "chunked"])
    pts += [probe_point(j, g, "lora", "llama3.2-1b", 2048, extra=["--loss", "chunked"])]
    return tiered(pts, 5)


# The allocator's expandable segments (PYTORCH_CUDA_ALLOC_CONF, read once per
# process, so these points run in groups of their own): the shared sweeps
# with them (gpjt-qwen0.5b, gpjt-llama3-8b) are where the simulated reserved
# peak misses most (issue 18), and the same jobs with and without them on one
# card separate the page-mapping mechanism from the rest.
EXPANDABLE_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def probe_expandable():
    """HF Trainer and DeepSpeed ZeRO-3 (rank 0 of 8) with expandable segments,
    at the shapes of the no-env points of probe_hf and probe_ds8."""
    j = "probe-es"
    pts = [probe_point(j, "hf-w1-es", "hf", m, s) for m in ("llama3.2-1b", "qwen2.5-0.5b")
           for s in (1024, 2048, 4096, 8192)]
    kw = dict(layers=4, world=8, rank=0)
    pts += _seq_sweep(j, "ds-w8-r0-es", "deepspeed", "llama3-8b", (1024, 2048, 4096, 8192),
                      extra=["--zero", "3"], **kw)
    pts += [probe_point(j, "ds-w8-r0-es", "deepspeed", "llama3-8b", 2048, 2, extra=["--zero", "3"], **kw)]
    for p in pts:
        p["env"] = dict(EXPANDABLE_ENV)
        p["id"] += "/expandable-segments"
    return tiered(pts, len(pts))


# The allocator's own history for issue 18's remaining reserved misses: which
# cached block the real allocator reused, at the moment the reserved total
# peaked. The probe's --memory-history N records the last N allocator events
# (torch.cuda.memory._record_memory_history) during training and appends a
# summary of the snapshot (memory_history.py) to memory-history.jsonl. 200,000
# events reach back over a whole run of these points (a few thousand events
# per block and step; the ring buffer keeps the last N). The recording costs
# time (each event keeps its Python frames), so these points carry no step
# time and run in groups of their own, after the shapes they repeat.
MEMORY_HISTORY_ENTRIES = 200000
MEMORY_HISTORY_EXTRA_S = 5.0  # the snapshot's conversion and summary per point: a guess
MEMHIST_SIBLING = {"fsdp-w8-r0-mh": "fsdp-w8-r0", "ds-w8-r0-mh": "ds-w8-r0",
                   "ds-w8-r0-es-mh": "ds-w8-r0-es", "peft-w1-mh": "peft-w1"}
DAY_SIBLING.update(MEMHIST_SIBLING)


def probe_memory_history():
    """FSDP1 FULL_SHARD and DeepSpeed ZeRO-3 (with and without expandable
    segments) as rank 0 of 8 at llama3-8b 4 blocks, and HF LoRA on
    Qwen2.5-0.5B, each with the allocator's history (tier 1, cheap)."""
    j, kw = "probe-memhist", dict(layers=4, world=8, rank=0)
    pts = [probe_point(j, "fsdp-w8-r0-mh", "fsdp", "llama3-8b", s, extra=["--zero", "3"], **kw)
           for s in (1024, 2048)]
    pts += [probe_point(j, "ds-w8-r0-mh", "deepspeed", "llama3-8b", 2048, extra=["--zero", "3"], **kw)]
    es = probe_point(j, "ds-w8-r0-es-mh", "deepspeed", "llama3-8b", 2048, extra=["--zero", "3"], **kw)
    es["env"], es["id"] = dict(EXPANDABLE_ENV), es["id"] + "/expandable-segments"
    pts += [es, probe_point(j, "peft-w1-mh", "lora", "qwen2.5-0.5b", 2048)]
    for p in pts:
        p["args"] += ["--memory-history", str(MEMORY_HISTORY_ENTRIES)]
        p["id"] += "/memory-history"
        p["est_s"] = round(p["est_s"] + MEMORY_HISTORY_EXTRA_S, 2)
    return tiered(pts, len(pts))


# What round 8 found missing (docs/validation.md, "The 0.5B sequence sweeps:
# one logits segment more or less"): the reserved peak of DeepSpeed ZeRO-3 in
# fp16 on Qwen1.5-0.5B at batch 1 follows the first steps' history (a step
# skipped by the loss scaler, padding). These lengths of gpjt's sweep
# (calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl, built without zero.Init)
# stepped up one fp32 logits block (931, 1416, 1581, 1696) or did not (1592);
# the probe's records now say, per step, whether DeepSpeed skipped it
# (step_overflow) and the allocator after steps 1, 2 and the last
# (memory_by_step), which the replay can be held to. Led as single-GPU
# DeepSpeed (ds-w1).
STEPS_SEQ = (931, 1416, 1581, 1592, 1696)
DAY_SIBLING["steps-w1"] = "ds-w1"


def repeats(point, tokens):
    """Whether ftest_probe.py --repeat-short TOKENS runs this point once more at
    its process's end (ftest_probe.repeatable: timed on one real GPU, no
    allocator history, at most TOKENS tokens a micro-batch)."""
    a = point.get("args") or []
    if point.get("kind") != "probe" or not tokens or point.get("world") != 1 \
            or "--memory-history" in a or "fsdp2-trace" in a:
        return False

    def value(flag, default):
        return int(a[a.index(flag) + 1]) if flag in a else default
    return value("--seq", 512) * value("--batch", 1) <= tokens


def probe_steps():
    """DeepSpeed ZeRO-3 fp16 on one real rank at the lengths above (tier 1, after
    the HF Trainer's core)."""
    return tiered([probe_point("probe-steps", "steps-w1", "deepspeed", "qwen1.5-0.5b", s,
                               extra=["--zero", "3", "--no-zero-init", "--precision", "fp16-mixed"])
                   for s in STEPS_SEQ], len(STEPS_SEQ))


GROUP_FAMILY = {"steps-w1": "deepspeed", "hf-w1": "hf", "peft-w1": "hf", "ds-w1": "deepspeed", "ds-w8-r0": "deepspeed",
                "ds-w8-r7": "deepspeed", "fsdp-w1": "fsdp", "fsdp-w8-r0": "fsdp", "fsdp-w8-r7": "fsdp",
                "liger-w1": "liger", "hf-w1-es": "hf", "ds-w8-r0-es": "deepspeed",
                "fsdp-w8-r0-mh": "fsdp", "ds-w8-r0-mh": "deepspeed", "ds-w8-r0-es-mh": "deepspeed",
                "peft-w1-mh": "hf"}


# --- b. ftrain on CUDA --------------------------------------------------------

# The leads are the 2026-11-26 H200 day's nine ftrain CUDA records
# (calibrate/records/ftrain-h200-2026-11-26.jsonl: measured.step_time_s, the
# median step) and the driver's elapsed seconds for each (state.jsonl,
# point-end), all 4 steps: (model, layers, seq, batch, precision, attention,
# checkpointing, loss, step s, elapsed s). The plan's earlier lead (a step at
# 22 TFLOP/s, from a learning run's bound) was 2.7 times too fast: the
# benchmark of the full model was cut at 25.6 s against 10.
FTRAIN_DAY_2026_11_26 = [
    ("llama3.2-1b", 2, 1024, 1, "bf16-mixed", "flash", "none", "standard", 0.2946, 3.411),
    ("llama3.2-1b", 2, 2048, 1, "bf16-mixed", "flash", "none", "standard", 0.6723, 5.010),
    ("llama3.2-1b", 2, 1024, 4, "bf16-mixed", "flash", "none", "standard", 0.6139, 4.811),
    ("llama3.2-1b", 2, 1024, 1, "fp32", "flash", "none", "standard", 0.1501, 3.009),
    ("llama3.2-1b", 2, 1024, 1, "bf16-mixed", "eager", "none", "standard", 0.1555, 2.812),
    ("llama3.2-1b", 2, 2048, 1, "bf16-mixed", "flash", "full", "standard", 0.7374, 5.216),
    ("llama3.2-1b", 2, 1024, 1, "bf16-mixed", "flash", "none", "chunked", 0.3182, 3.614),
    ("qwen2.5-0.5b", 4, 1024, 1, "bf16-mixed", "flash", "none", "standard", 0.8771, 5.009),
    ("tiny-llama", 2, 32, 2, "fp32", "flash", "none", "standard", 0.0009, 0.604),
]
FTRAIN_DAY_STEPS = 4
FTRAIN_BASE = ("bf16-mixed", "flash", "none", "standard")
_DAY = [dict(zip(("model", "layers", "seq", "batch", "precision", "attention", "checkpointing", "loss",
                  "step_s", "elapsed_s"), r)) for r in FTRAIN_DAY_2026_11_26]


def _day_step(**kw):
    return next(r["step_s"] for r in _DAY if all(r[k] == v for k, v in kw.items()))


def _ftrain_start_and_init():
    """The fixed start (CUDA context, cuBLASLt, the arena) is what the tiny
    model's point took beyond its steps (its 22,688 weights draw in no time);
    the seeded init's rate is the median over the larger models of parameters
    per second of what remains (1B at 2 blocks 219-242 M/s, Qwen2.5-0.5B at 4
    blocks 218 M/s: the draw on the pool, the upload, the arena)."""
    tiny = next(r for r in _DAY if r["model"] == "tiny-llama")
    start = tiny["elapsed_s"] - FTRAIN_DAY_STEPS * tiny["step_s"]
    rates = sorted(param_count(r["model"], r["layers"]) / (r["elapsed_s"] - FTRAIN_DAY_STEPS * r["step_s"] - start)
                   for r in _DAY if r["model"] != "tiny-llama")
    return start, (rates[len(rates) // 2] + rates[(len(rates) - 1) // 2]) / 2


FTRAIN_START_S, FTRAIN_INIT_PARAMS_PER_S = _ftrain_start_and_init()
# How the step grows with the sequence and the batch, from the 1B records at 2
# blocks (bf16-mixed, flash): 1,024 -> 2,048 tokens per sequence took 2.28
# times as long (exponent 1.19: ftrain's flash kernel, one block of queries per
# head and sequence, does s^2 work per block), 1 -> 4 sequences 2.08 times
# (exponent 0.53: at batch 1 the GPU is mostly idle).
FTRAIN_SEQ_EXP = math.log(_day_step(model="llama3.2-1b", seq=2048, batch=1, precision="bf16-mixed",
                                    attention="flash", checkpointing="none")
                          / _day_step(model="llama3.2-1b", seq=1024, batch=1, precision="bf16-mixed",
                                      attention="flash", checkpointing="none", loss="standard")) / math.log(2)
FTRAIN_BATCH_EXP = math.log(_day_step(model="llama3.2-1b", seq=1024, batch=4)
                            / _day_step(model="llama3.2-1b", seq=1024, batch=1, precision="bf16-mixed",
                                        attention="flash", loss="standard")) / math.log(4)


def _flag_factors():
    """Each setting's step against the base (bf16-mixed, flash, no
    recomputation, standard loss) at the same shape, as measured: fp32 0.51,
    eager 0.53 (ftrain's flash kernel is the slow part of its bf16 step), full
    recomputation 1.10 (at 2,048 tokens), chunked loss 1.08. Selective
    recomputation (not measured) takes full's, an upper bound of its work."""
    base = dict(model="llama3.2-1b", seq=1024, batch=1, precision="bf16-mixed", attention="flash",
                checkpointing="none", loss="standard")
    f = {"fp32": _day_step(**dict(base, precision="fp32")), "eager": _day_step(**dict(base, attention="eager")),
         "chunked": _day_step(**dict(base, loss="chunked"))}
    f = {k: v / _day_step(**base) for k, v in f.items()}
    f["full"] = _day_step(**dict(base, seq=2048, checkpointing="full")) / _day_step(**dict(base, seq=2048))
    f["selective"] = f["full"]
    return f


FTRAIN_FLAG = _flag_factors()


def _flags_factor(precision, attention, checkpointing, loss):
    out = 1.0
    for v in (precision, attention, checkpointing, loss):
        out *= FTRAIN_FLAG.get(v, 1.0)
    return out


def _ftrain_ref(model, seq, batch, flags):
    """The day's record a point's step scales from: among the model's own
    records (else those of the nearest model in parameters of its
    architecture, else of any), the one with the point's settings, else the
    base settings, then the nearest sequence, then the nearest batch."""
    own = [r for r in _DAY if r["model"] == model]
    if not own:
        kind = load_model(model)["model_type"]
        same = [r for r in _DAY if load_model(r["model"])["model_type"] == kind] or _DAY
        n = math.log(param_count(model))
        best = min(same, key=lambda r: abs(math.log(param_count(r["model"])) - n))
        own = [r for r in _DAY if r["model"] == best["model"]]

    def key(r):
        mine = (r["precision"], r["attention"], r["checkpointing"], r["loss"])
        return (mine == flags, mine == FTRAIN_BASE, -abs(math.log(seq / r["seq"])),
                -abs(math.log(batch / r["batch"])))
    return max(own, key=key)


def ftrain_step_s(model, layers, seq, batch, precision="fp32", attention="flash", checkpointing="none",
                  loss="standard", grad_accum=1, offload=False, vocab=None):
    """One optimizer step's lead, scaled from the day's nearest record: by
    blocks for the same model (the whole step, head included, scales with
    the blocks: an upper bound, which the full model's benchmark, cut at 25.6
    s, needs; scaling by FLOPs gives 23.5 s), by the step's FLOPs for another
    model; then by the measured sequence and batch exponents, the settings'
    measured factors and the micro-batches. Optimizer offload adds the host
    traffic and host AdamW of the probe's model."""
    r = _ftrain_ref(model, seq, batch, (precision, attention, checkpointing, loss))
    if r["model"] == model and vocab is None:
        step = r["step_s"] * (layers or load_model(model)["num_hidden_layers"]) / r["layers"]
    else:
        step = r["step_s"] * step_flops(model, layers, r["seq"] * r["batch"], False, vocab) \
            / step_flops(r["model"], r["layers"], r["seq"] * r["batch"], False)
    step *= (seq / r["seq"]) ** FTRAIN_SEQ_EXP * (batch / r["batch"]) ** FTRAIN_BATCH_EXP
    step *= _flags_factor(precision, attention, checkpointing, loss) \
        / _flags_factor(r["precision"], r["attention"], r["checkpointing"], r["loss"])
    step *= grad_accum
    if offload:
        n = param_count(model, layers, vocab)
        step += 16 * n / HOST_COPY_BYTES_PER_S + n / HOST_ADAM_PARAMS_PER_S
    return step


def ftrain_cost(model, layers, seq, batch, steps, vocab=None, **settings):
    init = param_count(model, layers, vocab) / FTRAIN_INIT_PARAMS_PER_S
    return FTRAIN_START_S + init + steps * ftrain_step_s(model, layers, seq, batch, vocab=vocab, **settings)


def _settings(args):
    """ftrain's settings among a point's arguments, with ftrain's defaults."""
    def val(flag, default):
        return args[args.index(flag) + 1] if flag in args else default
    return {"precision": val("--precision", "fp32"), "attention": val("--attention", "flash"),
            "checkpointing": val("--checkpointing", "none"), "loss": val("--loss", "standard"),
            "grad_accum": int(val("--grad-accum", "1")), "offload": val("--offload", "none") != "none"}


def ftrain_point(model, seq, batch=1, layers=0, extra=(), tier=1, steps=4):
    extra = list(extra)
    args = ["--model", model, "--seq", str(seq), "--batch", str(batch), "--steps", str(steps)]
    if layers:
        args += ["--layers", str(layers)]
    args += extra
    tags = [model + (f"-L{layers}" if layers else ""), f"s{seq}", f"b{batch}"] + flag_tags(extra)
    est = ftrain_cost(model, layers, seq, batch, steps, **_settings(extra))
    return {"id": "ftrain/" + "/".join(tags), "job": "ftrain-records", "kind": "ftrain", "args": args,
            "est_s": round(est, 2), "needs": ["ftrain"], "tier": tier}


def ftrain_records():
    """ftrain --device cuda runs whose records `ftest check` compares with the
    estimator's ftrain profile (allocator accounting, step time)."""
    m, bf = "llama3.2-1b", ["--precision", "bf16-mixed"]
    t1 = [ftrain_point(m, 1024, layers=2, extra=bf), ftrain_point(m, 2048, layers=2, extra=bf),
          ftrain_point(m, 1024, 4, layers=2, extra=bf), ftrain_point(m, 1024, layers=2),
          ftrain_point(m, 1024, layers=2, extra=bf + ["--attention", "eager"]),
          ftrain_point(m, 2048, layers=2, extra=bf + ["--checkpointing", "full"]),
          ftrain_point(m, 1024, layers=2, extra=bf + ["--loss", "chunked"]),
          # ftrain offloads the optimizer of a partition only (trainer/config.c):
          # ZeRO-Offload's stage 2 (Ren et al., 2021), on one rank.
          ftrain_point(m, 1024, layers=2, extra=bf + ["--zero", "2", "--offload", "optimizer"]),
          ftrain_point("qwen2.5-0.5b", 1024, layers=4, extra=bf),
          ftrain_point("tiny-llama", 32, 2)]
    t2 = [ftrain_point(m, s, layers=4, extra=bf, tier=2) for s in (512, 1024, 2048, 4096)]
    t2 += [ftrain_point(m, 4096, layers=2, extra=bf + ["--checkpointing", "selective"], tier=2),
           ftrain_point("qwen2.5-0.5b", 4096, layers=4, extra=bf + ["--loss", "chunked"], tier=2),
           ftrain_point("llama3-8b", 1024, layers=1, extra=bf, tier=2),
           ftrain_point("llama3-8b", 2048, layers=1, extra=bf + ["--checkpointing", "full"], tier=2),
           ftrain_point("tinyllama-1.1b", 2048, layers=2, extra=bf, tier=2),
           ftrain_point(m, 8192, layers=2, extra=bf, tier=2),
           ftrain_point(m, 1024, layers=2, extra=bf + ["--grad-accum", "4"], tier=2),
           ftrain_point(m, 2048, extra=bf, tier=2),
           ftrain_point("tiny-qwen2", 32, 2, extra=["--attention", "eager"], tier=2),
           ftrain_point("tiny-llama-bias", 32, 2, extra=bf, tier=2)]
    return t1 + t2


def check_point(ident, run, est_s, needs, tier=1, **kw):
    return {"id": ident, "job": "ftrain-check" if not ident.startswith("bench/") else "bench",
            "kind": "check", "run": run, "est_s": est_s, "needs": needs, "tier": tier, **kw}


# The learning runs train on ftrain's synthetic task (trainer/data.h): every
# target is pi(input) for a random permutation pi of the vocabulary, and every
# target is uniform over it. A model that knows nothing of pi can do no better
# than ln V; it learns pi pair by pair, so what a run can show depends on how
# often it sees each pair: exposures = steps x batch x seq / V. tiny-llama's
# check (tests/trainer_model.c asks the same of the CPU: below 0.1 in 50
# steps) gives each of its 64 pairs 50. The GPU day of 2026-11-26 ran the
# 1B-block check at Llama-3.2-1B's 128,256 tokens, 60 steps of 8 x 256: 0.96
# exposures per pair, and it went 12.18 -> 11.78 = ln 128,256 + 0.02, the
# uniform floor (no in-context help either: a token lies on a cycle of pi short
# enough to repeat inside 256 tokens with probability 256 / V = 0.2%). The
# block check keeps Llama-3.2-1B's blocks, batch, sequence and steps and takes
# the largest power-of-two vocabulary that gives each pair tiny-llama's
# exposures.
TINY_LEARNING = {"model": "tiny-llama", "vocab": load_model("tiny-llama")["vocab_size"], "steps": 50, "batch": 2, "seq": 32, "lr": "2e-2",
                 "warmup": 2}


def learning_exposures(run):
    return run["steps"] * run["batch"] * run["seq"] / run["vocab"]


def _block_learning():
    run = {"model": "llama3.2-1b", "steps": 60, "batch": 8, "seq": 256, "lr": "1e-3", "warmup": 0}
    need, v = learning_exposures(TINY_LEARNING), 1
    while run["steps"] * run["batch"] * run["seq"] / (2 * v) >= need:
        v *= 2
    return dict(run, vocab=v)


BLOCK_LEARNING = _block_learning()   # vocabulary 2048: 60 exposures per pair


def learning_args(run):
    a = ["--seq", str(run["seq"]), "--batch", str(run["batch"]), "--steps", str(run["steps"]),
         "--lr", run["lr"]]
    if run["model"] == "tiny-llama":
        a = ["--model", "tiny-llama"] + a
    return a + (["--warmup", str(run["warmup"])] if run["warmup"] else [])


def ftrain_checks():
    """Op parity first (cheap, and it says whether the rest of b can work),
    then whole-model gradients CUDA against the CPU trainer, then learning."""
    grads = [("tiny-llama", 32, 2, []), ("tiny-qwen2", 40, 1, ["--attention", "eager", "--loss", "chunked"]),
             ("tiny-llama-bias", 32, 2, [])]
    # Costs: what each took on 2026-11-26 (state.jsonl; the leads were 4, 12,
    # 5 and 15 s): 0.81 s per tiny gradient check, 9.8 s for the 1B-shaped one
    # (its CPU side included), 0.8 s for tiny-llama's learning run.
    pts = [check_point(f"check/grad-parity/{m}", "grad_parity", 0.81, ["ftrain"],
                       args=["--model", m, "--seq", str(s), "--batch", str(b)] + x) for m, s, b, x in grads]
    # llama3.2-1b's block shapes (head dim 64, 32 query and 8 kv heads, the
    # kernels' register instance), one block, a 4096-token vocabulary.
    pts.append(check_point("check/grad-parity/llama3.2-1b-shaped", "grad_parity", 9.8, ["ftrain"],
                           args=["--seq", "128", "--batch", "2"],
                           shaped={"base": "llama3.2-1b", "name": "1block-v4096",
                                   "set": {"num_hidden_layers": 1, "vocab_size": 4096}}))
    # The block learning run at its 2,048-token vocabulary took 6.0 s on
    # 2026-11-26 (call 7).
    b, block_s = BLOCK_LEARNING, 6.0
    pts += [check_point("check/learning/tiny-llama", "learning", 0.8, ["ftrain"],
                        args=learning_args(TINY_LEARNING)),
            check_point(f"check/learning/llama3.2-1b-L2-v{b['vocab']}", "learning", round(block_s, 1), ["ftrain"],
                        args=learning_args(BLOCK_LEARNING) + ["--layers", "2", "--precision", "bf16-mixed"],
                        shaped={"base": "llama3.2-1b", "name": f"v{BLOCK_LEARNING['vocab']}",
                                "set": {"vocab_size": BLOCK_LEARNING["vocab"]}})]
    return pts


# --- c. ftrain against PyTorch --------------------------------------------------

BENCH_SHAPE = {"model": "llama3.2-1b", "seq": 2048, "batch": 1, "steps": 8}


def bench_points():
    """The same 1B-class Llama step (seq 2048, bf16, AdamW) in ftrain, PyTorch
    eager and torch.compile, one after the other on the same GPU."""
    b = BENCH_SHAPE
    tag = f"{b['model']}/s{b['seq']}/b{b['batch']}"
    est_f = ftrain_cost(b["model"], 0, b["seq"], b["batch"], b["steps"], precision="bf16-mixed")
    return [check_point(f"bench/ftrain/{tag}", "bench_ftrain", round(est_f, 1), ["ftrain"], shape=b),
            check_point(f"bench/torch-eager/{tag}", "bench_torch", 15.0, ["torch", "transformers"],
                        shape=b, compiled=False),
            check_point(f"bench/torch-compile/{tag}", "bench_torch", 75.0, ["torch", "transformers"],
                        shape=b, compiled=True)]


JOB_ORDER = ["check-gpu", "probe-hf", "probe-steps", "probe-ds8", "probe-peft", "probe-ds1", "probe-fsdp1",
             "probe-liger", "probe-es", "probe-memhist", "probe-fsdp8", "ftrain-check", "ftrain-records", "bench"]
SETUP_EST_S = 30.0  # per call: GPU and versions, wheels installed, binaries checked


def default_plan():
    """Every point of the day in the order it runs: the op parity first (tier
    0), then each part's core (tier 1: a, then b, then c), then the
    extensions (tier 2)."""
    # 1.0 s on 2026-11-26 (the lead was 25)
    pts = [check_point("check/gpu-parity", "gpu_parity", 1.0, ["gpu_parity"], tier=0)]
    pts[0]["job"] = "check-gpu"
    for f in (probe_steps, probe_hf, probe_ds8, probe_peft, probe_ds1, probe_fsdp1, probe_fsdp8, probe_liger,
              probe_expandable, probe_memory_history):
        pts += f()
    pts += ftrain_checks() + ftrain_records() + bench_points()
    order = {j: i for i, j in enumerate(JOB_ORDER)}
    keyed = sorted(enumerate(pts), key=lambda ip: (ip[1].get("tier", 1), order[ip[1]["job"]], ip[0]))
    out = [p for _, p in keyed]
    ids = [p["id"] for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError("two plan points share an id")
    return out


def start_cost(point):
    """The cost of a fresh process before this point (probe groups only)."""
    return PROCESS_START_S[GROUP_FAMILY[point["group"]]] if point["kind"] == "probe" else 0.0


def simulate(points, budget_s, call_s):
    """Packs the points into calls as the driver would if every estimate
    held: consecutive points of one probe group share a process; a call
    starts with the set-up; a point that does not fit the call's rest starts
    the next call; one that does not fit the budget's rest is skipped.
    Returns {id: call number, or 0 for skipped} and the seconds per call."""
    where, calls, spent, call_used, prev_group = {}, [], 0.0, None, None
    for p in points:
        for _ in range(2):
            if call_used is None:
                call_used, prev_group = SETUP_EST_S, None
                spent += SETUP_EST_S
                calls.append(SETUP_EST_S)
            cost = p["est_s"] + (start_cost(p) if p.get("group") != prev_group else 0.0)
            if spent + cost > budget_s or cost + SETUP_EST_S > call_s:
                where[p["id"]] = 0
                break
            if call_used + cost > call_s:
                call_used = None  # the next call
                continue
            call_used += cost
            spent += cost
            calls[-1] += cost
            prev_group = p.get("group")
            where[p["id"]] = len(calls)
            break
    return where, calls
