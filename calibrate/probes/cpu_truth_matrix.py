"""The matrix of `make cpu-truth`: which configurations are traced, at which
world sizes and ranks, with every framework setting that changes memory
pinned explicitly (tiny models cross other thresholds than real ones, so the
record says which side of each threshold this run was on).

Pure data and functions of it; no torch import."""

BATCH, SEQ = 2, 64

# Small but realistic shapes (HF config.json fields). Each is what its family's
# modeling code really runs; only the sizes are small.
SHAPES = {
    # Llama with grouped-query attention (8 query heads share 2 K/V heads).
    "llama-gqa": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                  "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 688,
                  "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
                  "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                  "tie_word_embeddings": False, "hidden_act": "silu"},
    # Llama with a tied head and biases on attention and MLP.
    "llama-tied-bias": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                        "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 688,
                        "num_hidden_layers": 2, "num_attention_heads": 8,
                        "num_key_value_heads": 4, "max_position_embeddings": 256,
                        "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                        "tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True,
                        "hidden_act": "silu"},
    # Qwen2: q/k/v biases, tied head.
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
              "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
              "tie_word_embeddings": True, "hidden_act": "silu"},
    # Gemma-2: four norms per block ((1 + w) RMSNorm in fp32), GeGLU, soft-capping.
    "gemma2": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
               "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 64, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0, "tie_word_embeddings": True,
               "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu_pytorch_tanh",
               "query_pre_attn_scalar": 64, "sliding_window": 64,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    # A small Mixtral: 4 experts, top-2 routing.
    "mixtral-moe": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                    "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 256,
                    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                    "num_local_experts": 4, "num_experts_per_tok": 2,
                    "tie_word_embeddings": False, "hidden_act": "silu"},
}

# DDP: torch/nn/parallel/distributed.py bucket_cap_mb default 25 (torch 2.15).
DDP_DEFAULT = {"bucket_cap_mb": 25, "gradient_as_bucket_view": False, "optimizer_foreach": True}

# DeepSpeed 0.19.8 deepspeed/runtime/zero/config.py defaults, and a "small" set
# that crosses the thresholds at these sizes the way 5e8/1e5 do at 8B.
DS_DEFAULT = {"reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000,
              "overlap_comm": False, "contiguous_gradients": True,
              "stage3_prefetch_bucket_size": 50000000,
              "stage3_param_persistence_threshold": 100000,
              "stage3_max_live_parameters": 1000000000,
              "stage3_max_reuse_distance": 1000000000, "optimizer_foreach": True}
DS_SMALL = dict(DS_DEFAULT, reduce_bucket_size=200000, allgather_bucket_size=200000,
                stage3_prefetch_bucket_size=100000, stage3_param_persistence_threshold=1000,
                stage3_max_live_parameters=300000, stage3_max_reuse_distance=300000)

# FSDP1 torch/distributed/fsdp/fully_sharded_data_parallel.py defaults (2.15).
FSDP1_DEFAULT = {"sharding_strategy": "FULL_SHARD", "backward_prefetch": "BACKWARD_PRE",
                 "forward_prefetch": False, "limit_all_gathers": True, "use_orig_params": False,
                 "reduce_dtype": "bf16", "optimizer_foreach": True}
# FSDP2 fully_shard defaults: reshard_after_forward=True; reduce in fp32 is the
# usual MixedPrecisionPolicy of torchtitan and accelerate's FSDP2 path.
FSDP2_DEFAULT = {"reshard_after_forward": True, "reduce_dtype": "fp32", "optimizer_foreach": True}

LORA_QV = {"r": 8, "alpha": 16, "targets": ["q_proj", "v_proj"], "names": "q,v"}
LORA_ALL = {"r": 16, "alpha": 32, "names": "all-linear",
            "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"]}
LORA_DORA = dict(LORA_QV, dora=True)
# Pure bf16 LoRA as torchtune and Answer.AI run it: the adapters kept in the
# model's bf16 (PEFT get_peft_model(autocast_adapter_dtype=False)).
LORA_ALL_BF16 = dict(LORA_ALL, dtype="bf16")


def ranks_of(world, alike=False):
    """Rank 0, and the last rank where ranks may differ (shard padding)."""
    return [0] if world == 1 or alike else [0, world - 1]


def point(framework, shape, world, precision="fp32", zero=0, settings=None, checkpointing="none",
          attention="eager", lora=None, zero_init=True, alike=False, tag=""):
    c = {"framework": framework, "shape_name": shape, "shape": SHAPES[shape], "world": world,
         "precision": precision, "zero": zero, "settings": dict(settings or {}),
         "checkpointing": checkpointing, "attention": attention, "lora": lora,
         "zero_init": zero_init, "batch": BATCH, "seq": SEQ}
    c["ranks"] = ranks_of(world, alike)
    parts = [framework, shape, f"N{world}", precision]
    if framework == "deepspeed":
        parts.append(f"z{zero}" + ("" if zero < 3 else ("-init" if zero_init else "-noinit")))
    if framework == "fsdp1":
        parts.append(c["settings"]["sharding_strategy"])
    if framework == "fsdp2":
        parts.append("reshard" if c["settings"]["reshard_after_forward"] else "no-reshard")
    if checkpointing != "none":
        parts.append("ckpt-" + checkpointing)
    if attention != "eager":
        parts.append(attention)
    if lora:
        parts.append(f"lora-{lora['names']}-r{lora['r']}" + ("-dora" if lora.get("dora") else "")
                     + ("-bf16" if lora.get("dtype") == "bf16" else ""))
    if tag:
        parts.append(tag)
    c["name"] = " ".join(parts)
    return c


def ddp_points():
    out = []
    for w in (1, 2, 4, 8):
        for shape in SHAPES:
            for prec in ("fp32", "bf16-mixed"):
                out.append(point("ddp", shape, w, prec, settings=DDP_DEFAULT, alike=True))
        out.append(point("ddp", "llama-gqa", w, "bf16", settings=DDP_DEFAULT, alike=True))
    for w in (1, 2):
        for ck in ("reentrant", "non-reentrant"):
            out.append(point("ddp", "llama-gqa", w, checkpointing=ck, settings=DDP_DEFAULT,
                             alike=True))
        out.append(point("ddp", "llama-gqa", w, attention="sdpa", settings=DDP_DEFAULT,
                         alike=True))
        for lora in (LORA_QV, LORA_ALL, LORA_DORA):
            out.append(point("ddp", "llama-gqa", w, lora=lora, settings=DDP_DEFAULT, alike=True))
    for w in (2, 8):
        out.append(point("ddp", "llama-gqa", w, settings=dict(DDP_DEFAULT, bucket_cap_mb=1),
                         alike=True, tag="bucket1mb"))
    return out


def deepspeed_points():
    out = []
    for w in (1, 2, 4, 8):
        for stage in (1, 2):
            for shape in ("llama-gqa", "qwen2", "gemma2", "mixtral-moe"):
                out.append(point("deepspeed", shape, w, zero=stage, settings=DS_SMALL, tag="small"))
            out.append(point("deepspeed", "llama-gqa", w, "bf16-mixed", zero=stage,
                             settings=DS_SMALL, tag="small"))
            out.append(point("deepspeed", "llama-gqa", w, zero=stage, settings=DS_DEFAULT,
                             tag="defaults"))
        for zi in (True, False):
            for sname, s in (("defaults", DS_DEFAULT), ("small", DS_SMALL)):
                out.append(point("deepspeed", "llama-gqa", w, zero=3, zero_init=zi, settings=s,
                                 tag=sname))
        out.append(point("deepspeed", "llama-gqa", w, "bf16-mixed", zero=3, settings=DS_SMALL,
                         tag="small"))
    for w in (2,):
        out.append(point("deepspeed", "llama-gqa", w, zero=2, checkpointing="non-reentrant",
                         settings=DS_SMALL, tag="small"))
        out.append(point("deepspeed", "llama-gqa", w, zero=3, checkpointing="non-reentrant",
                         settings=DS_SMALL, tag="small"))
        out.append(point("deepspeed", "llama-gqa", w, zero=2, lora=LORA_ALL, settings=DS_SMALL,
                         tag="small"))
        out.append(point("deepspeed", "llama-gqa", w, zero=3, lora=LORA_ALL, settings=DS_SMALL,
                         tag="small"))
    return out


def fsdp1_points():
    out = []
    for w in (1, 2, 4, 8):
        for strat, zero in (("FULL_SHARD", 3), ("SHARD_GRAD_OP", 2), ("NO_SHARD", 0)):
            for prec in ("fp32", "bf16-mixed"):
                out.append(point("fsdp1", "llama-gqa", w, prec, zero=zero,
                                 settings=dict(FSDP1_DEFAULT, sharding_strategy=strat)))
    for w in (2, 4):
        for tag, s in (("prefetch-post", dict(FSDP1_DEFAULT, backward_prefetch="BACKWARD_POST")),
                       ("no-prefetch", dict(FSDP1_DEFAULT, backward_prefetch=None)),
                       ("forward-prefetch", dict(FSDP1_DEFAULT, forward_prefetch=True)),
                       ("no-limit", dict(FSDP1_DEFAULT, limit_all_gathers=False)),
                       ("reduce-fp32", dict(FSDP1_DEFAULT, reduce_dtype="fp32"))):
            out.append(point("fsdp1", "llama-gqa", w, "bf16-mixed", zero=3, settings=s, tag=tag))
        for shape in ("qwen2", "gemma2", "mixtral-moe"):
            out.append(point("fsdp1", shape, w, "bf16-mixed", zero=3, settings=FSDP1_DEFAULT))
    out.append(point("fsdp1", "llama-gqa", 2, zero=3, checkpointing="non-reentrant",
                     settings=FSDP1_DEFAULT))
    out.append(point("fsdp1", "llama-gqa", 2, zero=3, lora=LORA_ALL,
                     settings=dict(FSDP1_DEFAULT, use_orig_params=True)))
    out.append(point("fsdp1", "llama-gqa", 2, "bf16", zero=3, lora=LORA_ALL_BF16,
                     settings=dict(FSDP1_DEFAULT, use_orig_params=True)))
    return out


def fsdp2_points():
    out = []
    for w in (1, 2, 4, 8):
        for reshard in (True, False):
            s = dict(FSDP2_DEFAULT, reshard_after_forward=reshard)
            zero = 3 if reshard else 2
            out.append(point("fsdp2", "llama-gqa", w, "fp32", zero=zero, settings=s))
            out.append(point("fsdp2", "llama-gqa", w, "bf16-mixed", zero=zero, settings=s))
            out.append(point("fsdp2", "llama-gqa", w, "bf16-mixed", zero=zero,
                             settings=dict(s, reduce_dtype="bf16"), tag="reduce-bf16"))
    for w in (2, 4):
        for shape in ("qwen2", "gemma2", "mixtral-moe"):
            out.append(point("fsdp2", shape, w, "bf16-mixed", zero=3, settings=FSDP2_DEFAULT))
    for ck in ("reentrant", "non-reentrant"):
        out.append(point("fsdp2", "llama-gqa", 2, zero=3, checkpointing=ck, settings=FSDP2_DEFAULT))
    out.append(point("fsdp2", "llama-gqa", 2, zero=3, lora=LORA_ALL, settings=FSDP2_DEFAULT))
    out.append(point("fsdp2", "llama-gqa", 2, zero=3, lora=LORA_QV, settings=FSDP2_DEFAULT))
    out.append(point("fsdp2", "llama-gqa", 2, "bf16", zero=3, lora=LORA_ALL_BF16,
                     settings=FSDP2_DEFAULT))
    return out


def points():
    return ddp_points() + deepspeed_points() + fsdp1_points() + fsdp2_points()


def record_config(c):
    """The record's `config`: the run description with ftest's names
    (docs/records.md), the model inline."""
    s = c["settings"]
    cfg = {"model": c["shape_name"], "model_config": dict(c["shape"]),
           "micro_batch": c["batch"], "grad_accum": 1, "seq_len": c["seq"],
           "precision": c["precision"], "zero": c["zero"], "offload": "none",
           "checkpointing": "none" if c["checkpointing"] == "none" else "full",
           "attention": c["attention"], "loss": "standard", "optimizer": "adamw",
           "expandable_segments": False, "probe_mode": "cpu-trace " + c["framework"]}
    if c["checkpointing"] != "none":
        cfg["checkpointing_impl"] = c["checkpointing"]
    if c["framework"] == "deepspeed":
        cfg["zero_init"] = c["zero_init"] if c["zero"] == 3 else True
    if c["framework"] in ("fsdp1", "fsdp2"):
        cfg["fsdp_version"] = 1 if c["framework"] == "fsdp1" else 2
        cfg["load_dtype"] = "bf16" if c["precision"] == "bf16" else "fp32"
        cfg["fsdp_reduce_dtype"] = "fp32" if s.get("reduce_dtype") == "fp32" else "param"
    if c["lora"]:
        cfg["lora_rank"] = c["lora"]["r"]
        cfg["lora_alpha"] = c["lora"]["alpha"]
        cfg["lora_targets"] = c["lora"]["names"]
        cfg["lora_dropout"] = 0.0
        if c["lora"].get("dora"):
            cfg["lora_dora"] = True
        if c["lora"].get("dtype") == "bf16":
            cfg["lora_dtype"] = "bf16"
    return cfg
