"""How each framework of `make cpu-truth` is set up on the CPU as rank r of N,
and one training step of it (cpu_truth.py runs them under the storage tracker).

Every function here takes the configuration dict of one matrix point (keys
below) and returns a `Job`: the wrapped model, how to run forward, backward and
the optimizer step, and the objects whose tensors get names at the peak.

Workarounds for the CPU and the fake process group, each with its reason:
  * DDP: the fake backend's Work has no future DDP's reducer can wait on, so a
    no-op communication hook returns the bucket as is (what an all-reduce
    leaves in place: the bucket's bytes are the same).
  * DeepSpeed: the CPU accelerator JIT-builds a shared-memory all-reduce op
    (deepspeed/comm/torch.py build_shm_op, 0.19.8) that only speeds CPU
    collectives: replaced by None, so no compiler is needed. ZeRO-3's
    assert_ints_same_as_other_ranks (runtime/zero/utils.py) broadcasts from
    rank 0; under the fake backend nothing arrives, so a rank other than 0
    would see a disagreement that real equal ranks never have: skipped.
  * zero.Init on the CPU needs torch._dynamo, transformers.masking_utils and
    transformers.generation.utils imported before it patches tensor
    constructors (they build tensors at import time).
  * AdamW gets foreach=True, as torch picks for CUDA tensors
    (torch/optim/optimizer.py _default_to_fused_or_foreach); on the CPU it
    would default to the for-loop, whose temporaries are one tensor at a time.
"""

import contextlib
import functools
import os


class Job:
    """One set-up training job: step() runs forward, backward and the optimizer."""

    def __init__(self, model, forward, backward, step, named=None, settings=None):
        self.model = model          # the wrapped model (hooks go on its decoder layers)
        self.forward = forward      # (input_ids) -> loss
        self.backward = backward    # (loss) -> None
        self.step = step            # () -> None: optimizer step and zero_grad
        self.named = named or {}    # name -> object whose tensors are named at the peak
        self.settings = settings or {}


def torch_dtype(name):
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16}[name]


def hf_config(shape):
    import transformers
    kw = dict(shape)
    kw.pop("name", None)
    return transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)


def build_model(c):
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_config(hf_config(c["shape"]),
                                                          attn_implementation=c["attention"])
    if c["precision"] == "bf16":
        model.to(torch.bfloat16)
    if c.get("lora"):
        model = add_lora(model, c["lora"])
    if c["checkpointing"] != "none":
        model.config.use_cache = False
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": c["checkpointing"] == "reentrant"})
        if c.get("lora"):
            model.enable_input_require_grads()
    return model


def add_lora(model, lora):
    import peft
    cfg = peft.LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                          target_modules=lora["targets"], use_dora=lora.get("dora", False),
                          task_type="CAUSAL_LM")
    # autocast_adapter_dtype=False keeps bf16 adapters in a bf16 model (pure bf16 LoRA)
    return peft.get_peft_model(model, cfg, autocast_adapter_dtype=lora.get("dtype") != "bf16")


def adamw(params):
    import torch
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-4, foreach=True)


def autocast(c):
    import torch
    if c["precision"] == "bf16-mixed" and c["framework"] == "ddp":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def plain_job(c, model, opt, named):
    def forward(x):
        with autocast(c):
            return model(input_ids=x, labels=x).loss

    def step():
        opt.step()
        opt.zero_grad(set_to_none=True)

    named = dict(named, optimizer=opt)
    return Job(model, forward, lambda loss: loss.backward(), step, named)


# -- DDP ---------------------------------------------------------------------

def setup_ddp(c):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = build_model(c)
    bucket_mb = c["settings"]["bucket_cap_mb"]
    if c["world"] > 1:
        ddp = DDP(model, bucket_cap_mb=bucket_mb)

        def noop(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        ddp.register_comm_hook(None, noop)
    else:
        ddp = model  # world 1: the HF Trainer does not wrap a single process either
    opt = adamw(ddp.parameters())
    return plain_job(c, ddp, opt, {"model": model})


# -- DeepSpeed ---------------------------------------------------------------

def deepspeed_prepare():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch._dynamo  # noqa: F401  (zero.Init patches constructors these use at import)
    import transformers.generation.utils  # noqa: F401
    import transformers.masking_utils  # noqa: F401
    import sys
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401
    import deepspeed.runtime.zero.partitioned_param_coordinator  # noqa: F401
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    sys.modules["deepspeed.runtime.zero.partitioned_param_coordinator"] \
        .assert_ints_same_as_other_ranks = lambda ints: None
    return deepspeed


def ds_config(c):
    s = c["settings"]
    zero = {"stage": c["zero"],
            "reduce_bucket_size": s["reduce_bucket_size"],
            "allgather_bucket_size": s["allgather_bucket_size"],
            "overlap_comm": s["overlap_comm"],
            "contiguous_gradients": s["contiguous_gradients"]}
    if c["zero"] == 3:
        for k in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                  "stage3_max_live_parameters", "stage3_max_reuse_distance"):
            zero[k] = s[k]
    return {"train_micro_batch_size_per_gpu": c["batch"], "gradient_accumulation_steps": 1,
            "zero_optimization": zero, "bf16": {"enabled": c["precision"] == "bf16-mixed"},
            "fp16": {"enabled": False}, "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def setup_deepspeed(c):
    deepspeed = deepspeed_prepare()
    cfg = ds_config(c)
    if c["zero"] == 3 and c["zero_init"]:
        with deepspeed.zero.Init(config_dict_or_path=cfg):
            model = build_model(c)
    else:
        model = build_model(c)
    opt = adamw(model.parameters())
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    return Job(engine, lambda x: engine(input_ids=x, labels=x).loss, engine.backward,
               engine.step, {"model": model, "ds": opt}, {"deepspeed_config": cfg})


# -- FSDP1 -------------------------------------------------------------------

def decoder_layer_class(model):
    for m in model.modules():
        if type(m).__name__.endswith("DecoderLayer"):
            return type(m)
    raise RuntimeError("no decoder layer class")


def setup_fsdp1(c):
    import torch
    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    s = c["settings"]
    model = build_model(c)
    strategy = {"FULL_SHARD": ShardingStrategy.FULL_SHARD,
                "SHARD_GRAD_OP": ShardingStrategy.SHARD_GRAD_OP,
                "NO_SHARD": ShardingStrategy.NO_SHARD}[s["sharding_strategy"]]
    prefetch = {"BACKWARD_PRE": BackwardPrefetch.BACKWARD_PRE,
                "BACKWARD_POST": BackwardPrefetch.BACKWARD_POST, None: None}[s["backward_prefetch"]]
    mp = None
    if c["precision"] == "bf16-mixed":
        red = torch.float32 if s["reduce_dtype"] == "fp32" else torch.bfloat16
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=red,
                            buffer_dtype=torch.bfloat16)
    wrapped = FSDP(model, sharding_strategy=strategy, mixed_precision=mp,
                   device_id=torch.device("cpu"), backward_prefetch=prefetch,
                   forward_prefetch=s["forward_prefetch"], limit_all_gathers=s["limit_all_gathers"],
                   use_orig_params=s["use_orig_params"],
                   auto_wrap_policy=functools.partial(
                       transformer_auto_wrap_policy,
                       transformer_layer_cls={decoder_layer_class(model)}))
    opt = adamw(wrapped.parameters())
    return plain_job(c, wrapped, opt, {"model": wrapped})


# -- FSDP2 -------------------------------------------------------------------

def setup_fsdp2(c):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    s = c["settings"]
    model = build_model(c)
    mesh = init_device_mesh("cpu", (c["world"],))
    kw = {"mesh": mesh, "reshard_after_forward": s["reshard_after_forward"]}
    if c["precision"] == "bf16-mixed":
        red = torch.float32 if s["reduce_dtype"] == "fp32" else torch.bfloat16
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=red)
    cls = decoder_layer_class(model)
    for m in list(model.modules()):
        if isinstance(m, cls):
            fully_shard(m, **kw)
    fully_shard(model, **kw)
    opt = adamw(model.parameters())
    return plain_job(c, model, opt, {"model": model})


SETUPS = {"ddp": setup_ddp, "deepspeed": setup_deepspeed, "fsdp1": setup_fsdp1,
          "fsdp2": setup_fsdp2}
