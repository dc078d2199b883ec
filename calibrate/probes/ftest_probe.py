#!/usr/bin/env python3
"""ftest_probe.py: measure one training run of a real framework and append one
`ftest.record/1` line (docs/records.md) per rank it stands for.

Runs on a GPU machine only (never in CI); `ftest calibrate --probe MODE` runs it
point by point. The model is built from a config.json with random weights (no
downloads). Modes:

  hf             HF Trainer + PyTorch (DDP at world size 1): --attention eager|sdpa,
                 --checkpointing none|full, --precision bf16-mixed|fp16-mixed|fp32
  deepspeed      HF Trainer + DeepSpeed ZeRO --zero 1|2|3, --offload none|optimizer,
                 --no-zero-init (model built before TrainingArguments(deepspeed=...))
  fsdp           FSDP1 FullyShardedDataParallel, --zero 3 (FULL_SHARD) | 2 (SHARD_GRAD_OP)
  fsdp2          FSDP2 fully_shard per decoder layer, then the root
  lora           PEFT LoRA (--lora-r) on every linear of the decoder
  qlora          PEFT LoRA over a bitsandbytes 4-bit NF4 base
  adam8bit       HF Trainer with bitsandbytes' 8-bit AdamW
  fsdp2-trace    FSDP2 under FakeTensorMode with torch's FSDPMemTracker, on the CPU

One GPU standing in for N: --world N --rank r initialises torch.distributed with
the `fake` backend (FakeStore), so each tensor has rank r's shapes and every
collective returns at once. Such records say "rank-emulated" and carry no step
time. Memory is read from the caching allocator (max_memory_allocated,
active_bytes.all.peak, max_memory_reserved) and cudaMemGetInfo (torch.cuda.
mem_get_info); step time is the median of the steps after --warmup.

What fsdp2-trace cannot see: the caching allocator (its reserve and
fragmentation), the CUDA context and library workspaces (cuBLAS, NCCL),
kernels' internal scratch, and time. It sees every tensor FSDP2 and autograd
hold, by module and phase.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_record as pr  # noqa: E402

PROBE_VERSION = "1"
MODES = ("hf", "deepspeed", "fsdp", "fsdp2", "lora", "qlora", "adam8bit", "fsdp2-trace")
FRAMEWORK_OF = {"hf": "hf", "deepspeed": "deepspeed", "fsdp": "fsdp", "fsdp2": "fsdp",
                "lora": "hf", "qlora": "hf", "adam8bit": "hf", "fsdp2-trace": "fsdp"}
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, required=False)
    p.add_argument("--model", default="tiny-llama",
                   help="shipped model name (models/NAME.json) or a config.json path")
    p.add_argument("--layers", type=int, default=0, help="first K decoder blocks only")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--precision", default="bf16-mixed",
                   choices=("bf16-mixed", "fp16-mixed", "fp32"))
    p.add_argument("--attention", default="sdpa", choices=("eager", "sdpa"))
    p.add_argument("--checkpointing", default="none", choices=("none", "full"))
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3))
    p.add_argument("--offload", default="none", choices=("none", "optimizer"))
    p.add_argument("--no-zero-init", action="store_true")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--world", type=int, default=1, help="ranks of the job stood for")
    p.add_argument("--rank", type=int, default=0, help="the rank this process stands for")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gpu", default="h100-80gb", help="key of models/gpus.json")
    p.add_argument("--stack", default="", help="an `ftest stacks` name these versions match")
    p.add_argument("--record", help="append the record to this file")
    p.add_argument("--versions", action="store_true", help="print the stack and exit")
    a = p.parse_args(argv)
    if not a.versions and not a.mode:
        p.error("--mode is required")
    if a.world < 1 or not 0 <= a.rank < a.world:
        p.error("--rank must be in [0, --world)")
    if min(a.seq, a.batch, a.grad_accum, a.steps) < 1 or a.warmup < 0 or a.warmup >= a.steps:
        p.error("--seq, --batch, --grad-accum, --steps must be positive; --warmup below --steps")
    return a


def versions():
    """The software stack, with null for what is not installed."""
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "deepspeed", "peft", "bitsandbytes"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "unknown")
        except Exception:  # an absent or broken package is recorded as absent
            out[name] = None
    out["cuda"] = None
    if out["torch"]:
        import torch
        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            out["gpu_name"] = torch.cuda.get_device_name(0)
            try:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                      "--format=csv,noheader"], capture_output=True, text=True,
                                     timeout=20)
                out["driver"] = smi.stdout.strip() or None
            except (OSError, subprocess.SubprocessError):
                out["driver"] = None
    return out


def git_commit():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def model_config(a):
    """The HF config.json of --model, truncated to --layers."""
    path = a.model if a.model.endswith(".json") else os.path.join(ROOT, "models", a.model + ".json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    # models/*.json are HF config.json files plus ftest's own "ftest" block.
    hf = {k: v for k, v in cfg.items() if k != "ftest"}
    if a.layers:
        hf["num_hidden_layers"] = min(a.layers, hf["num_hidden_layers"])
    return hf


def emulate_rank(a):
    """torch.distributed as rank r of N with the fake backend, or plain world 1."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29599")
    # One GPU: every emulated rank runs on device 0.
    os.environ["LOCAL_RANK"] = "0"
    os.environ["RANK"] = str(a.rank)
    os.environ["WORLD_SIZE"] = str(a.world)
    if a.world == 1:
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"
    dist.init_process_group("fake", store=FakeStore(), rank=a.rank, world_size=a.world)


def compute_dtype(a):
    import torch
    return {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16,
            "fp32": torch.float32}[a.precision]


def build_model(a, hf_cfg):
    import transformers
    kw = dict(hf_cfg)
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=a.attention)


def random_batches(a, vocab, n):
    import torch
    g = torch.Generator().manual_seed(1337)
    return [torch.randint(0, vocab, (a.batch, a.seq), generator=g) for _ in range(n)]


class Timer:
    """Wall time of each optimizer step, synchronised with the device."""

    def __init__(self):
        self.times, self.t0 = [], None

    def start(self):
        import torch
        torch.cuda.synchronize()
        self.t0 = time.perf_counter()

    def stop(self):
        import torch
        torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self.t0)


def ds_config(a):
    cfg = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": a.grad_accum,
        "zero_optimization": {"stage": a.zero},
        "bf16": {"enabled": a.precision == "bf16-mixed"},
        "fp16": {"enabled": a.precision == "fp16-mixed"},
    }
    if a.offload == "optimizer":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return cfg


def run_trainer(a, hf_cfg):
    """HF Trainer for modes hf, deepspeed, lora, qlora, adam8bit; returns step times."""
    import torch
    import transformers

    ds = ds_config(a) if a.mode == "deepspeed" else None
    timer = Timer()

    class StepTimes(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            timer.start()

        def on_step_end(self, args, state, control, **kw):
            timer.stop()

    def training_args():
        return transformers.TrainingArguments(
            output_dir=os.path.join("/tmp", f"ftest-probe-{os.getpid()}"),
            per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.grad_accum,
            max_steps=a.steps, bf16=a.precision == "bf16-mixed",
            fp16=a.precision == "fp16-mixed", gradient_checkpointing=a.checkpointing == "full",
            optim="adamw_bnb_8bit" if a.mode == "adam8bit" else "adamw_torch",
            deepspeed=ds, report_to=[], save_strategy="no", logging_strategy="no",
            dataloader_num_workers=0, disable_tqdm=True)

    # With zero.Init (the default under ZeRO-3): TrainingArguments(deepspeed=...)
    # first, so from_config builds the model already partitioned. Without it
    # (--no-zero-init): the model first, as from_pretrained-then-configure does.
    if a.mode == "deepspeed" and a.zero == 3 and not a.no_zero_init:
        args = training_args()
        model = build_model(a, hf_cfg)
    elif a.mode == "qlora":
        model = build_qlora_model(a, hf_cfg)
        args = training_args()
    else:
        model = build_model(a, hf_cfg)
        args = training_args()
    if a.mode == "lora":
        import peft
        model = peft.get_peft_model(model, lora_config(a))
    if a.checkpointing == "full":
        model.config.use_cache = False

    data = [{"input_ids": t[0], "labels": t[0].clone()}
            for t in random_batches(a, hf_cfg["vocab_size"], a.steps * a.batch * a.grad_accum)]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   callbacks=[StepTimes()])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    return timer.times


def lora_config(a):
    import peft
    return peft.LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, lora_dropout=0.0,
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                           "up_proj", "down_proj"], task_type="CAUSAL_LM")


def build_qlora_model(a, hf_cfg):
    """A 4-bit NF4 base: bitsandbytes quantizes at load, so the random model is
    saved locally first and loaded back with a quantization config."""
    import tempfile
    import peft
    import transformers
    base = build_model(a, hf_cfg)
    d = tempfile.mkdtemp(prefix="ftest-probe-qlora-")
    base.save_pretrained(d)
    del base
    q = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                        bnb_4bit_compute_dtype=compute_dtype(a),
                                        bnb_4bit_use_double_quant=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, quantization_config=q, attn_implementation=a.attention, device_map={"": 0})
    model = peft.prepare_model_for_kbit_training(
        model, use_gradient_checkpointing=a.checkpointing == "full")
    return peft.get_peft_model(model, lora_config(a))


def run_fsdp(a, hf_cfg):
    """A plain loop around FSDP1 (--mode fsdp) or FSDP2 (--mode fsdp2); returns step times."""
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():  # world 1: a real one-rank group
        dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    model = build_model(a, hf_cfg)
    layer_cls = type(model.model.layers[0])
    dt = compute_dtype(a)
    if a.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if a.mode == "fsdp":
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        strategy = {3: ShardingStrategy.FULL_SHARD, 2: ShardingStrategy.SHARD_GRAD_OP}[a.zero]
        mp = None if a.precision == "fp32" else MixedPrecision(dt, dt, dt)
        model = FSDP(model, sharding_strategy=strategy, mixed_precision=mp, device_id=0,
                     auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                        transformer_layer_cls={layer_cls}))
    else:
        fully_shard, policy = fsdp2_api()
        mp = policy(param_dtype=dt, reduce_dtype=torch.float32) if a.precision != "fp32" else None
        kw = {"mp_policy": mp} if mp else {}
        for layer in model.model.layers:
            fully_shard(layer, reshard_after_forward=a.zero == 3, **kw)
        fully_shard(model, reshard_after_forward=a.zero == 3, **kw)
        model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = random_batches(a, hf_cfg["vocab_size"], a.steps * a.grad_accum)
    timer = Timer()
    torch.cuda.reset_peak_memory_stats()
    for s in range(a.steps):
        timer.start()
        for m in range(a.grad_accum):
            x = batches[s * a.grad_accum + m].cuda()
            with torch.autocast("cuda", dtype=dt, enabled=a.mode == "fsdp2" and a.precision == "fp16-mixed"):
                loss = model(input_ids=x, labels=x).loss / a.grad_accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        timer.stop()
    return timer.times


def fsdp2_api():
    """fully_shard and MixedPrecisionPolicy: torch.distributed.fsdp from 2.6,
    torch.distributed._composable.fsdp in 2.4-2.5."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def trace_fsdp2(a, hf_cfg):
    """FSDP2 on the CPU under FakeTensorMode with FSDPMemTracker (torch >= 2.5):
    rank r's tensors by module and phase, without a GPU. Returns the peak total
    bytes and each kind's own peak (sharded/unsharded params, grads, activations,
    temporaries, all-gather and reduce-scatter buffers, optimizer state)."""
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    fully_shard, policy = fsdp2_api()
    from torch.distributed.device_mesh import init_device_mesh
    dt = compute_dtype(a)
    dev = torch.device("cpu")
    # The mesh holds real rank numbers: it is built before fake mode begins.
    mesh = init_device_mesh("cpu", (a.world,))
    with FakeTensorMode():
        kw = dict(hf_cfg)
        cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=a.attention)
        if a.checkpointing == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        kw = {"mp_policy": policy(param_dtype=dt, reduce_dtype=torch.float32)} \
            if a.precision != "fp32" else {}
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=a.zero == 3, **kw)
        fully_shard(model, mesh=mesh, reshard_after_forward=a.zero == 3, **kw)
        # The for-loop AdamW: under fake tensors the tracker keeps foreach's
        # intermediates as optimizer state (Llama-3.2-1B, rank 0 of 8: 7,955 MiB of
        # "OptState" for a 295 MiB shard; 589 MiB, exactly m and v, without
        # foreach), so a traced step lacks foreach's real temporaries instead.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=False)
        x = torch.randint(0, hf_cfg["vocab_size"], (a.batch, a.seq), device=dev)
        tracker = FSDPMemTracker(mod=model, optm=opt)
        with tracker:
            for _ in range(2):  # the second step holds the optimizer state
                tracker.reset_mod_stats()
                model(input_ids=x, labels=x).loss.backward()
                opt.step()
                opt.zero_grad()
        peak = tracker.get_tracker_snapshot("peak")
    # The snapshot maps each device to bytes per kind of tensor and a "Total"
    # (torch/distributed/_tools/mem_tracker.py, _TOTAL_KEY): each kind's own peak.
    kinds = peak.get(dev, {})
    by_kind = {getattr(k, "value", str(k)): int(v) for k, v in kinds.items()
               if k != "Total" and v}
    return int(kinds.get("Total", 0)), by_kind


def main(argv):
    a = parse_args(argv)
    stack = versions()
    print("ftest_probe " + PROBE_VERSION + ": " + json.dumps(stack), file=sys.stderr)
    if a.versions:
        print(json.dumps(stack, indent=1))
        return 0
    import torch
    hf_cfg = model_config(a)
    framework = FRAMEWORK_OF[a.mode]
    traced = a.mode == "fsdp2-trace"
    if not traced and not torch.cuda.is_available():
        print("ftest_probe: no CUDA device (every mode but fsdp2-trace needs one)", file=sys.stderr)
        return 2
    emulate_rank(a)
    oom, times, ranks = False, [], []
    try:
        if traced:
            peak, by_kind = trace_fsdp2(a, hf_cfg)
            ranks = [{"rank": a.rank, "peak_allocated_bytes": peak,
                      "traced_peak_bytes_by_kind": by_kind}]
        else:
            times = run_fsdp(a, hf_cfg) if a.mode in ("fsdp", "fsdp2") else run_trainer(a, hf_cfg)
    except torch.OutOfMemoryError:
        oom = True
    if not traced:
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        ranks = [{"rank": a.rank,
                  "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                  "peak_active_bytes": int(stats.get("active_bytes.all.peak", 0)) or None,
                  "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
                  # What nvidia-smi shows now (reserved plus the CUDA context); the
                  # caching allocator keeps its peak reserve, so this is the peak's.
                  "device_used_bytes": int(total - free),
                  "device_total_bytes": int(total)}]
    method = pr.METHOD_TRACED if traced else (
        pr.METHOD_EMULATED if a.world > 1 else pr.METHOD_MEASURED)
    steady = times[a.warmup:]
    config = {"model": a.model, "micro_batch": a.batch, "grad_accum": a.grad_accum,
              "seq_len": a.seq, "precision": a.precision,
              "zero": a.zero if framework != "hf" else 0,
              "offload": a.offload, "checkpointing": a.checkpointing,
              "attention": a.attention, "loss": "standard",
              "optimizer": "adamw", "expandable_segments":
                  "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              "probe_mode": a.mode}
    if a.layers:
        config["layers"] = a.layers
    if a.stack:
        config["stack"] = a.stack
    if framework == "deepspeed":
        config["zero_init"] = not a.no_zero_init
    if a.mode in ("fsdp", "fsdp2", "fsdp2-trace"):
        config["fsdp_version"] = 1 if a.mode == "fsdp" else 2
    if a.mode in ("lora", "qlora"):
        config["lora"] = {"r": a.lora_r, "alpha": 2 * a.lora_r, "targets": "all-linear",
                          "base": "nf4" if a.mode == "qlora" else "bf16"}
    if a.mode == "adam8bit":
        config["optimizer_impl"] = "bitsandbytes adamw_8bit"
    run = {
        "source": f"ftest_probe.py {PROBE_VERSION} (git {git_commit()})",
        "date": datetime.date.today().isoformat(),
        "framework": framework, "method": method, "world_size": a.world,
        "emulated_rank": a.rank,
        "hardware": {"gpu": a.gpu, "gpus_per_node": a.world, "nodes": 1},
        "config": config, "stack": stack, "ranks": ranks, "oom": oom,
        "step_time_s": statistics.median(steady) if steady and method == pr.METHOD_MEASURED
        else None,
        "tokens_per_step": a.batch * a.seq * a.grad_accum * a.world,
    }
    line = pr.record_line(pr.make_record(run))
    if a.record:
        pr.append_line(a.record, line)
    else:
        sys.stdout.write(line)
    return 1 if oom else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
