"""The probe's runners: one training run of a real framework on the GPU (or,
for fsdp2-trace, traced on the CPU), returning its step times. ftest_probe.py
parses the arguments, measures the allocator around these and writes the
record; nothing here writes a record.

Every import of torch and the frameworks is inside a function, so that the
probe's pure parts (argument parsing, the record's config) import without
them (calibrate/probes/test_probe_cli.py runs on machines without torch).

Versions this was written against, where a name or a default matters:
transformers 4.49 - 5.17 (TrainingArguments, Trainer, BitsAndBytesConfig,
integrations.deepspeed), peft 0.14 - 0.21 (LoraConfig, get_peft_model,
prepare_model_for_kbit_training), torch 2.6 - 2.11 (FSDP1's BackwardPrefetch
and forward_prefetch in torch/distributed/fsdp/fully_sharded_data_parallel.py;
FSDP2's fully_shard, set_modules_to_forward_prefetch and
set_modules_to_backward_prefetch in torch/distributed/fsdp/_fully_shard/
_fully_shard.py, torch >= 2.6), DeepSpeed 0.16 - 0.19 (zero_optimization,
offload_optimizer, zero_force_ds_cpu_optimizer in deepspeed/runtime/
zero/config.py and deepspeed/runtime/engine.py), liger-kernel 0.5 - 0.8
(_apply_liger_kernel in liger_kernel/transformers/monkey_patch.py).
"""

import os
import time

# ftest's --optimizer names (estimator/catalog) -> TrainingArguments.optim.
HF_OPTIM = {"adamw": "adamw_torch", "adamw-8bit": "adamw_bnb_8bit",
            "paged-adamw-8bit": "paged_adamw_8bit", "paged-adamw-32bit": "paged_adamw_32bit",
            "adafactor": "adafactor", "sgd": "sgd"}
LORA_TARGETS = {"all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj"],
                "q,v": ["q_proj", "v_proj"]}


def compute_dtype(a):
    import torch
    return {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16,
            "fp32": torch.float32}[a.precision]


def no_init_weights():
    """Transformers' context that skips the random init of a new model
    (transformers.initialization in 5.x, modeling_utils in 4.x); a context
    that does nothing where neither has it (the init then runs, slowly)."""
    import contextlib
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            mod = __import__(where, fromlist=["no_init_weights"])
            return mod.no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


def fill_random(model, std, gen_device):
    """Weights drawn on `gen_device` (the GPU: the CPU's generator is serial,
    about a minute per 0.4 B parameters on a loaded two-core host) and copied
    to wherever the model is: matrices N(0, std) (the initializer_range of
    Llama's _init_weights), biases 0; the norms keep the ones their modules
    were built with."""
    import torch
    g = torch.Generator(device=gen_device).manual_seed(1337)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                t = torch.randn(p.shape, generator=g, device=gen_device, dtype=torch.float32)
                p.copy_(t.mul_(std))
                del t
            elif name.endswith("bias"):
                p.zero_()
    if gen_device != "cpu":
        torch.cuda.empty_cache()


def build_model(a, hf_cfg, device=None):
    """A random-weight model from the config, on `device` when given (the HF
    Trainer modes build on the GPU, where the Trainer would move it), on the
    host otherwise (DeepSpeed and FSDP place it themselves, as they do a
    from_pretrained model). The init is skipped and the weights drawn by
    fill_random; under DeepSpeed's zero.Init (ZeRO-3 without --no-zero-init)
    the model is built by Transformers as usual, already partitioned."""
    import contextlib
    import torch
    import transformers
    kw = dict(hf_cfg)
    if getattr(a, "mode", "") in ("hf", "adam8bit"):
        # from_config builds in config.json's torch_dtype (bfloat16 for the
        # shipped models); the HF Trainer's full fine-tuning that these records
        # name (--precision bf16-mixed: fp32 weights under autocast, as
        # from_pretrained without torch_dtype under transformers 4) needs fp32.
        kw.pop("torch_dtype", None)
        kw.pop("dtype", None)
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    zero_init = getattr(a, "mode", "") == "deepspeed" and a.zero == 3 and not a.no_zero_init
    if zero_init:
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=a.attention)
    where = torch.device(device) if device else contextlib.nullcontext()
    with no_init_weights(), where:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=a.attention)
    # no_init_weights replaces PreTrainedModel.init_weights, which post_init
    # calls to initialize *and* tie (transformers 5.17 modeling_utils.py
    # init_weights: initialize_weights() then tie_weights(recompute_mapping=
    # False); 4.x ties inside its `if _init_weights` branch): without this the
    # head of a tie_word_embeddings model is its own tensor (Qwen2.5-0.5B
    # 630,167,424 parameters, not 494,032,768; the GPU day of 2026-11-26).
    # from_pretrained ties after loading; tie_weights() with the mapping
    # recomputed from the config is that call, in 4.x and 5.x. Tied before the
    # draw, so fill_random (named_parameters: a tied tensor once) fills one.
    model.tie_weights()
    fill_random(model, getattr(cfg, "initializer_range", 0.02), "cpu" if a.smoke else "cuda")
    return model


def random_batches(a, vocab, n):
    import torch
    g = torch.Generator().manual_seed(1337)
    return [torch.randint(0, vocab, (a.batch, a.seq), generator=g) for _ in range(n)]


def device_name(a):
    return "cpu" if a.smoke else "cuda"


class Timer:
    """Wall time of each optimizer step, synchronised with the device."""

    def __init__(self, smoke=False):
        self.times, self.t0, self.smoke = [], None, smoke

    def _sync(self):
        if not self.smoke:
            import torch
            torch.cuda.synchronize()

    def start(self):
        self._sync()
        self.t0 = time.perf_counter()

    def stop(self):
        self._sync()
        self.times.append(time.perf_counter() - self.t0)


def ds_config(a):
    """The DeepSpeed config of a deepspeed-mode run. With optimizer offload
    and --ds-optimizer torch the Trainer's torch AdamW steps the host
    partition (zero_force_ds_cpu_optimizer false), which needs no compiled
    op; --ds-optimizer deepspeed names AdamW in the config, so DeepSpeed
    builds DeepSpeedCPUAdam (a JIT compile with ninja on first use)."""
    cfg = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": a.grad_accum,
        "zero_optimization": {"stage": a.zero},
        "bf16": {"enabled": a.precision == "bf16-mixed"},
        "fp16": {"enabled": a.precision == "fp16-mixed"},
    }
    if a.offload == "optimizer":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if a.ds_optimizer == "torch":
            cfg["zero_force_ds_cpu_optimizer"] = False
        else:
            cfg["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}
    return cfg


# DeepSpeed 0.19.8's modules that call zero/utils.py's cross-rank check by a
# name of their own (reset_step in partitioned_param_coordinator.py on the
# first step of every ZeRO-3 run; stage3.py under enable_sanity_checks;
# partition_parameters.py under safe_mode): each binding is replaced.
DS_RANK_CHECKERS = ("deepspeed.runtime.zero.utils",
                    "deepspeed.runtime.zero.partition_parameters",
                    "deepspeed.runtime.zero.partitioned_param_coordinator",
                    "deepspeed.runtime.zero.stage3")


def skip_fake_group_rank_checks():
    """Under the fake process group (one GPU as rank r of N), skips ZeRO-3's
    assert_ints_same_as_other_ranks. It (deepspeed/runtime/zero/utils.py,
    0.19.8) fills a tensor with the list's length on rank 0 and -1 elsewhere,
    broadcasts it from rank 0 and compares: the fake backend's broadcast moves
    nothing, so every rank but 0 reads -1 and raises "Detected a disagreement
    on list length between rank0 and rank7: rank0: -1" (ds-w8-r7 on the GPU
    day of 2026-11-26), a disagreement real equal ranks never have (each rank
    runs the same model and batch). Rank 0 passes only because it compares
    with itself, so the check is skipped on every fake-group rank alike; make
    cpu-truth skips it the same way (cpu_truth_setups.py). The check's few
    bytes of int64 tensors on step 1 are not part of the peak. Returns the
    modules patched."""
    import importlib
    import torch.distributed as dist
    if not dist.is_initialized() or dist.get_backend() != "fake":
        return []
    patched = []
    for name in DS_RANK_CHECKERS:
        mod = importlib.import_module(name)
        if hasattr(mod, "assert_ints_same_as_other_ranks"):
            mod.assert_ints_same_as_other_ranks = lambda ints: None
            patched.append(name)
    return patched


def lora_config(a):
    import peft
    return peft.LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, lora_dropout=0.0,
                           target_modules=LORA_TARGETS[a.lora_targets], task_type="CAUSAL_LM")


def build_qlora_model(a, hf_cfg):
    """A bitsandbytes base (NF4 or int8): quantized at load, so the random
    model is saved locally first and loaded back with a quantization config."""
    import shutil
    import tempfile
    import peft
    import transformers
    base = build_model(a, hf_cfg)
    d = tempfile.mkdtemp(prefix="ftest-probe-qlora-")
    try:
        base.save_pretrained(d)
        del base
        if a.quant == "int8":
            q = transformers.BitsAndBytesConfig(load_in_8bit=True)
        else:
            q = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                bnb_4bit_compute_dtype=compute_dtype(a),
                                                bnb_4bit_use_double_quant=a.double_quant)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            d, quantization_config=q, attn_implementation=a.attention, device_map={"": 0})
    finally:
        shutil.rmtree(d, ignore_errors=True)
    model = peft.prepare_model_for_kbit_training(
        model, use_gradient_checkpointing=a.checkpointing == "full")
    return peft.get_peft_model(model, lora_config(a))


def apply_chunked_loss(hf_cfg):
    """--loss chunked: Liger's fused linear cross-entropy, nothing else of
    Liger (RoPE, RMSNorm, SwiGLU and the plain cross-entropy left alone), so
    the record differs from a standard-loss one in the loss only."""
    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel
    _apply_liger_kernel(hf_cfg["model_type"], rope=False, rms_norm=False, swiglu=False,
                        cross_entropy=False, fused_linear_cross_entropy=True)


def training_args(a, ds):
    import transformers
    kw = dict(output_dir=os.path.join("/tmp", f"ftest-probe-{os.getpid()}"),
              per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.grad_accum,
              max_steps=a.steps, bf16=a.precision == "bf16-mixed",
              fp16=a.precision == "fp16-mixed", gradient_checkpointing=a.checkpointing == "full",
              optim=HF_OPTIM[a.optimizer], deepspeed=ds, report_to=[], save_strategy="no",
              logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True)
    if a.smoke:
        kw["use_cpu"] = True
    return transformers.TrainingArguments(**kw)


def trainer_model(a, hf_cfg, ds):
    """The model and TrainingArguments of an HF Trainer run, in the order the
    mode needs: with zero.Init (ZeRO-3 without --no-zero-init) the arguments
    come first, so from_config builds the model already partitioned; without
    it the model is built first, as from_pretrained-then-configure does."""
    if a.mode == "deepspeed" and a.zero == 3 and not a.no_zero_init:
        args = training_args(a, ds)
        return build_model(a, hf_cfg), args
    if a.mode == "qlora":
        model = build_qlora_model(a, hf_cfg)
        return model, training_args(a, ds)
    # DeepSpeed places the model itself: build it on the host as a user's
    # from_pretrained does; the plain Trainer modes build on the device.
    model = build_model(a, hf_cfg, None if a.mode == "deepspeed" else device_name(a))
    if a.mode == "lora":
        import peft
        model = peft.get_peft_model(model, lora_config(a))
    return model, training_args(a, ds)


def run_trainer(a, hf_cfg, box):
    """HF Trainer for modes hf, deepspeed, lora, qlora, adam8bit; returns step
    times. `box` receives the objects to free after the run."""
    import transformers
    if a.loss == "chunked":
        apply_chunked_loss(hf_cfg)
    ds = ds_config(a) if a.mode == "deepspeed" else None
    if ds:
        skip_fake_group_rank_checks()
    timer = Timer(a.smoke)
    held = {}  # the Trainer, once built: DeepSpeed's engine is its model_wrapped
    log = step_log(a, ds_skipped_steps(held) if ds else None)
    box["step_log"] = log

    class StepTimes(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            log.begin()
            timer.start()

        def on_step_end(self, args, state, control, **kw):
            timer.stop()
            log.end()

    model, args = trainer_model(a, hf_cfg, ds)
    box["model"] = model
    model.register_forward_pre_hook(mask_hook(log), with_kwargs=True)
    if a.checkpointing == "full":
        model.config.use_cache = False
    data = [{"input_ids": t[0], "labels": t[0].clone()}
            for t in random_batches(a, hf_cfg["vocab_size"], a.steps * a.batch * a.grad_accum)]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   callbacks=[StepTimes()])
    box["trainer"] = held["trainer"] = trainer
    reset_peaks(a)
    trainer.train()
    return timer.times


def step_log(a, skipped_steps=None):
    """The run's per-step notes (probe_steps.StepLog): the allocator read
    after steps 1, 2 and the last on the GPU, DeepSpeed's skipped steps where
    `skipped_steps` reads them."""
    from probe_steps import StepLog
    stats = None
    if not a.smoke:
        import torch
        stats = torch.cuda.memory_stats
    return StepLog(a.steps, stats, skipped_steps)


def ds_skipped_steps(held):
    """engine.skipped_steps of the Trainer in `held` (probe_steps.ds_skipped_steps)."""
    from probe_steps import ds_skipped_steps as read

    def skipped():
        trainer = held.get("trainer")
        return read(trainer)() if trainer is not None else 0
    return skipped


def mask_hook(log):
    from probe_steps import mask_hook as hook
    return hook(log)


def reset_peaks(a):
    """Drops the cached blocks of what came before (model build, a previous
    run), then restarts the peaks, so they are this run's training alone."""
    if a.smoke:
        return
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if getattr(a, "memory_history", 0):
        # Python frames only: C++ stacks cost a symbolisation per event.
        torch.cuda.memory._record_memory_history(max_entries=a.memory_history, stacks="python")


def stop_memory_history(a):
    """The allocator's snapshot (torch.cuda.memory._snapshot) when
    --memory-history recorded this run, and recording stopped; else None."""
    if not getattr(a, "memory_history", 0) or a.smoke:
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.synchronize()
        return torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def fsdp1_wrap(a, model, layer_cls, dt, dev="cuda"):
    import functools
    import torch
    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    strategy = {3: ShardingStrategy.FULL_SHARD, 2: ShardingStrategy.SHARD_GRAD_OP}[a.zero]
    prefetch = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST,
                "none": None}[a.fsdp_backward_prefetch]
    mp = None if a.precision == "fp32" else MixedPrecision(dt, dt, dt)
    return FSDP(model, sharding_strategy=strategy, mixed_precision=mp,
                device_id=0 if dev == "cuda" else torch.device("cpu"),
                backward_prefetch=prefetch, forward_prefetch=a.fsdp_forward_prefetch,
                auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                   transformer_layer_cls={layer_cls}))


def fsdp2_wrap(a, model, dt, dev="cuda"):
    """fully_shard per decoder layer, then the root; --fsdp2-prefetch N > 0
    makes each layer prefetch the next N in forward and the previous N in
    backward explicitly (FSDP2's default prefetches one, implicitly)."""
    import torch
    fully_shard, policy = fsdp2_api()
    mp = policy(param_dtype=dt, reduce_dtype=torch.float32) if a.precision != "fp32" else None
    kw = {"mp_policy": mp} if mp else {}
    layers = list(model.model.layers)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=a.zero == 3, **kw)
    fully_shard(model, reshard_after_forward=a.zero == 3, **kw)
    n = a.fsdp2_prefetch
    for i, layer in enumerate(layers if n > 0 else []):
        if i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch(layers[i + 1:i + 1 + n])
        if i > 0:
            layer.set_modules_to_backward_prefetch(layers[max(0, i - n):i][::-1])
    return model.to(dev)


def run_fsdp(a, hf_cfg, box):
    """A plain loop around FSDP1 (--mode fsdp) or FSDP2 (--mode fsdp2); returns step times."""
    import torch
    import torch.distributed as dist
    dev = device_name(a)
    if not dist.is_initialized():  # world 1: a real one-rank group
        dist.init_process_group("nccl" if dev == "cuda" else "gloo", rank=0, world_size=1)
    if dev == "cuda":
        torch.cuda.set_device(0)
    model = build_model(a, hf_cfg)
    layer_cls = type(model.model.layers[0])
    dt = compute_dtype(a)
    if a.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = fsdp1_wrap(a, model, layer_cls, dt, dev) if a.mode == "fsdp" \
        else fsdp2_wrap(a, model, dt, dev)
    box["model"] = model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    box["opt"] = opt
    batches = random_batches(a, hf_cfg["vocab_size"], a.steps * a.grad_accum)
    timer = Timer(a.smoke)
    log = step_log(a)
    box["step_log"] = log
    reset_peaks(a)
    for s in range(a.steps):
        log.begin()
        timer.start()
        for m in range(a.grad_accum):
            x = batches[s * a.grad_accum + m].to(dev)
            log.note_mask(None)  # no attention mask: no padding
            with torch.autocast(dev, dtype=dt,
                                enabled=a.mode == "fsdp2" and a.precision == "fp16-mixed"):
                loss = model(input_ids=x, labels=x).loss / a.grad_accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        timer.stop()
        log.end()
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
    """FSDP2 on the CPU under FakeTensorMode with torch's FSDPMemTracker (torch >= 2.5):
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


def forget_ds_module_stack():
    """Empties DeepSpeed's FWD_MODULE_STACK (deepspeed/runtime/zero/
    parameter_offload.py, 0.19.8): a module-level list to which every ZeRO-3
    engine's DeepSpeedZeRoOffload appends its root module (setup_zero_stage3_hooks)
    and which nothing pops again, engine.destroy() included. It kept each run's
    model, and with it every parameter, alive after the run: 3,914,483,712
    bytes still allocated before the second ZeRO-3 point of a process (the
    GPU day of 2026-11-26, ds-w8-r7 and ds-w8-r0-es), so each point needed a
    fresh process. Only the list's content: a run in progress has none (the
    stack holds the root and the modules inside a forward). Returns how many
    modules it held."""
    import sys
    mod = sys.modules.get("deepspeed.runtime.zero.parameter_offload")
    stack = getattr(mod, "FWD_MODULE_STACK", None)
    if not isinstance(stack, list):
        return 0
    n = len(stack)
    del stack[:]
    return n


def run_tensors(box):
    """Every tensor of the run in `box` that can hold device memory: the
    model's parameters (with their gradients and the tensors a framework
    keeps as their attributes: FSDP1's FlatParameter _local_shard and
    _full_param_padded, DeepSpeed ZeRO-3's ds_tensor), its buffers, and the
    optimizer's state."""
    model, opts = box.get("model"), [box.get("opt"), box.get("ds_opt")]
    if model is None and not any(opts):
        return []
    import torch
    out = []
    if isinstance(model, torch.nn.Module):
        for p in model.parameters():
            out += [p, p.grad] + [v for v in vars(p).values() if isinstance(v, torch.Tensor)]
        out += list(model.buffers())
    for opt in [o for o in opts if o is not None]:
        out += optimizer_tensors(opt, torch)
    return [t for t in out if isinstance(t, torch.Tensor)]


def optimizer_tensors(opt, torch):
    """A torch optimizer's state, or a DeepSpeed ZeRO optimizer's own tensors
    (its attributes, and the lists and dicts among them: the fp32 partitions,
    the flat gradient buffer) with its inner torch optimizer's state."""
    out = []
    for v in list(vars(opt).values()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += [t for t in v if isinstance(t, torch.Tensor)]
        elif isinstance(v, dict) and v is not getattr(opt, "state", None):
            out += [t for t in v.values() if isinstance(t, torch.Tensor)]
    inner = getattr(opt, "optimizer", None)
    if inner is not None and inner is not opt and hasattr(inner, "state"):
        out += optimizer_tensors(inner, torch)
    state = getattr(opt, "state", None)
    for per_param in (state.values() if isinstance(state, dict) else []):
        if isinstance(per_param, dict):
            out += [t for t in per_param.values() if isinstance(t, torch.Tensor)]
    return out


def free_storages(box):
    """Frees the memory of the run's tensors in place (their storages
    resized to nothing), whoever still holds the Python objects. FSDP1 as rank
    r of 8 on the fake group left its sharded FlatParameters alive past the
    run (547,890,176 bytes allocated before the next point, the GPU day of
    2026-11-26, fsdp-w8-r0 and fsdp-w8-r7), held from outside Python's
    collector (no Python referrer found: a C++ owner). A storage that cannot
    be resized (a view of memory the allocator does not own) is left alone.
    Returns the bytes freed."""
    freed, seen = 0, set()
    for t in run_tensors(box):
        try:
            s = t.untyped_storage()
            key = (s.data_ptr(), s.device)
            if s.nbytes() == 0 or key in seen:
                continue
            seen.add(key)
            n = s.nbytes()
            s.resize_(0)
            freed += n
        except (RuntimeError, NotImplementedError):  # not resizable: not ours to free
            continue
    return freed


def release(box):
    """Frees what one run left behind, so the next run in this process starts
    from an empty allocator: the DeepSpeed engine, the HF DeepSpeed config,
    Accelerate's state singletons, the model's and optimizer's memory,
    DeepSpeed's module stack, the cache. Returns the bytes free_storages
    released."""
    import gc
    import sys
    trainer = box.pop("trainer", None)
    engine = getattr(trainer, "model_wrapped", None) if trainer is not None else None
    if getattr(engine, "optimizer", None) is not None and hasattr(engine, "destroy"):
        box["ds_opt"] = engine.optimizer
    if engine is not None and hasattr(engine, "destroy"):
        try:
            engine.destroy()
        except Exception as e:  # a failed run may leave a half-built engine
            print(f"ftest_probe: the DeepSpeed engine's destroy() raised {type(e).__name__}: {e}",
                  file=sys.stderr)
    try:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config
        unset_hf_deepspeed_config()
    except Exception:  # older or newer transformers: nothing to unset
        pass
    try:
        from accelerate.state import AcceleratorState
        AcceleratorState._reset_state(True)
    except Exception:  # accelerate absent or renamed: the next Trainer rebuilds it
        pass
    freed = free_storages(box)
    box.clear()
    forget_ds_module_stack()
    del trainer, engine
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # torch absent (smoke without CUDA): nothing cached
        pass
    return freed
