#include "fw_registry.h"

#include <stdio.h>
#include <string.h>

#include "str_util.h"

#define FEAT(f) (1u << (f))

/* The message for a flag that belongs to other frameworks; `s` names the
 * flags where several share one feature. */
static int option_not_modelled(est_fw_feature f, const char *s, char *err, size_t errlen) {
    if (f == EST_FEAT_LORA_BF16)
        return ft_errorf(err, errlen, "LoRA adapters in bf16 (--lora-dtype bf16) are modelled under FSDP and "
                                      "the HF Trainer");
    if (f == EST_FEAT_CHUNKED_OUTPUT)
        return ft_errorf(err, errlen, "--loss chunked-output (torchtune's CEWithChunkedOutputLoss) is modelled "
                                      "under --framework hf and fsdp");
    if (f == EST_FEAT_FSDP_OPTIONS)
        return ft_errorf(err, errlen, "%s need%s --framework fsdp", s[0] ? s : "FSDP's settings",
                         strchr(s, ',') ? "" : "s");
    return ft_errorf(err, errlen, "--load-dtype bf16 needs --framework fsdp (with --framework hf, "
                                  "bf16-loaded weights train as --precision bf16)");
}

/* The feature's message for the run's framework, which does not model it. */
static int not_modelled(const est_run *run, est_fw_feature f, const char *subject, char *err,
                        size_t errlen) {
    const char *s = subject ? subject : "", *fw = est_framework_name(run->framework);
    switch (f) {
    case EST_FEAT_LORA:
        return ft_errorf(err, errlen, "LoRA is modelled for --framework hf (PEFT on the HF Trainer, "
                                      "DDP), fsdp and deepspeed (ZeRO-1/2); ftrain is not modelled yet");
    case EST_FEAT_PEFT_METHOD:
        return ft_errorf(err, errlen, "%s is modelled for --framework hf (PEFT on one GPU or DDP)", s);
    case EST_FEAT_PLAIN_LOOP:
        return ft_errorf(err, errlen, "--train-loop plain is modelled for --framework hf (one GPU or DDP)");
    case EST_FEAT_OPTIMIZER:
        return ft_errorf(err, errlen, "--optimizer %s is modelled for --framework hf only "
                                      "(DeepSpeed: adamw, sgd, adamw-8bit without offload; FSDP and ftrain: "
                                      "adamw or sgd)", s);
    case EST_FEAT_RL:
        return ft_errorf(err, errlen, "--rl %s is modelled on --framework hf and DeepSpeed ZeRO 0-2 (the "
                                      "reference model under ZeRO-3, FSDP and ftrain is not)", s);
    case EST_FEAT_MODULES_TO_SAVE:
        return ft_errorf(err, errlen, "modules_to_save is modelled on --framework hf (the FSDP LoRA "
                                      "profile does not have it yet)");
    case EST_FEAT_NON_REENTRANT:
        return ft_errorf(err, errlen, "non-reentrant checkpointing is torch.utils.checkpoint's; ftrain "
                                      "recomputes its own way (--framework hf, deepspeed or fsdp)");
    case EST_FEAT_ZERO:
        return ft_errorf(err, errlen,
                         "--framework hf is PyTorch DDP and has no ZeRO; use --framework deepspeed or fsdp");
    case EST_FEAT_ZERO1:
        return ft_errorf(err, errlen, "--framework %s has no ZeRO-1 equivalent; use --zero 0, 2 or 3", fw);
    case EST_FEAT_OFFLOAD:
        return ft_errorf(err, errlen, "--framework %s cannot offload; use --framework deepspeed or fsdp", fw);
    case EST_FEAT_OFFLOAD_OPTIMIZER:
        return ft_errorf(err, errlen, "--framework %s offloads parameters and optimizer together; "
                                      "use --offload optimizer+params", fw);
    case EST_FEAT_OFFLOAD_SGD:
        return ft_errorf(err, errlen, "DeepSpeed's CPU offload has no SGD (CPU Adam, Adagrad, Lion only)");
    case EST_FEAT_CKPT_SELECTIVE:
        return ft_errorf(err, errlen, "--checkpointing selective exists in ftrain only; Transformers "
                                      "checkpoints whole decoder layers (use full)");
    case EST_FEAT_FP16_MIXED:
        return ft_errorf(err, errlen, "ftrain has no fp16-mixed; use bf16-mixed or fp32");
    case EST_FEAT_SDPA:
        return ft_errorf(err, errlen, "ftrain implements eager and flash attention (no sdpa)");
    case EST_FEAT_ARCH: break;
    case EST_FEAT_HF_ONLY_STACK:
        return ft_errorf(err, errlen, "stack %s is read for --framework hf only (PyTorch, "
                                      "Transformers and PEFT; no DeepSpeed or FSDP)", s);
    case EST_FEAT_SINGLE_DEVICE:
        return ft_errorf(err, errlen, "--optimizer-in-backward and --activation-offload are modelled "
                                      "for --framework hf (single-device PyTorch recipes)");
    case EST_FEAT_DEEPSPEED_CONFIG:
        return ft_errorf(err, errlen, "config.deepspeed belongs to framework \"deepspeed\" records");
    case EST_FEAT_FP8_ALL_GATHER:
        return ft_errorf(err, errlen, "--fsdp-float8-all-gather is FSDP2's (--framework fsdp --fsdp-version 2)");
    case EST_FEAT_FP8:
        return ft_errorf(err, errlen, "--fp8 (torchao Float8Linear) is modelled for --framework hf and fsdp "
                                      "(accelerate's AO recipe); --framework %s is not", fw);
    case EST_FEAT_CKPT_POLICY:
        return ft_errorf(err, errlen, "--checkpointing selective-op and --ckpt-every are torch.utils."
                                      "checkpoint policies, modelled for --framework hf and fsdp");
    case EST_FEAT_COMPILE:
        return ft_errorf(err, errlen, "--compile is modelled for --framework hf, deepspeed and fsdp "
                                      "(ftrain compiles nothing)");
    case EST_FEAT_PARTIAL:
        return ft_errorf(err, errlen, "--trainable (unfrozen_parameters) is modelled for --framework hf and "
                                      "DeepSpeed ZeRO-3; not for --framework %s%s", fw,
                         run->framework == EST_FW_DEEPSPEED ? " below ZeRO-3" : "");
    case EST_FEAT_TP:
        return ft_errorf(err, errlen, "--tp (tensor parallelism) is modelled for FSDP2 only (torchtitan: "
                                      "--framework fsdp --fsdp-version 2); not for --framework %s", fw);
    case EST_FEAT_LORA_BF16: case EST_FEAT_CHUNKED_OUTPUT:
    case EST_FEAT_FSDP_OPTIONS:
    case EST_FEAT_LOAD_DTYPE: return option_not_modelled(f, s, err, errlen);
    case EST_FEAT_FUSED_ADAMW:
        return ft_errorf(err, errlen, "--adamw-impl fused is modelled for torch's AdamW under --framework hf, "
                                      "deepspeed or fsdp; not --framework %s", fw);
    case EST_FEAT_COUNT: break;
    }
    return ft_errorf(err, errlen, "this feature is not modelled for the framework");
}

static const char *offload_words(const est_run *r) {
    return r->offload == EST_OFFLOAD_NONE        ? ""
           : r->offload == EST_OFFLOAD_OPTIMIZER ? ", optimizer offload"
                                                 : ", optimizer+param offload";
}

static const char *ckpt_words(const est_run *r) {
    return r->checkpointing == EST_CKPT_NONE           ? ""
           : r->checkpointing == EST_CKPT_FULL         ? ", full checkpointing"
           : r->checkpointing == EST_CKPT_SELECTIVE_OP ? ", op-level selective checkpointing"
                                                       : ", selective recompute";
}

static const char *no_note(const est_run *run) {
    (void)run;
    return "";
}

/* HF Trainer on plain PyTorch (one GPU or DDP). */
static void hf_describe(const est_run *r, char *buf, size_t n) {
    snprintf(buf, n, "HF Trainer (PyTorch DDP)%s", ckpt_words(r));
}

/* DeepSpeed: TRL's reference model under ZeRO-3 is not modelled; LoRA is
 * modelled at ZeRO-1/2 (the frozen base whole on every rank, the adapters
 * flattened and partitioned) and at ZeRO-3 (every parameter partitioned and
 * gathered, the adapters alone in the optimizer's groups), not over a
 * bitsandbytes base at ZeRO-3 (seam_deepspeed_init.c). */
static int ds_limits(const est_run *run, est_fw_feature f, const char *subject, char *err,
                     size_t errlen) {
    if (f == EST_FEAT_RL && run->zero_stage >= 3) return not_modelled(run, f, subject, err, errlen);
    if (f == EST_FEAT_LORA && run->zero_stage == 0)
        return ft_errorf(err, errlen, "LoRA under DeepSpeed is modelled for ZeRO-1, 2 and 3 (ZeRO-0 is not modelled)");
    /* QLoRA at ZeRO-3: NF4 packed in the compute dtype (bnb_4bit_quant_storage,
     * PEFT docs/source/accelerate/deepspeed.md) is partitioned like any tensor
     * (seam_deepspeed_zero3.c ds_param_numel); LLM.int8's int8 codes and a
     * parameter offload of the codes are not modelled. */
    if (f == EST_FEAT_LORA && run->zero_stage == 3 && run->quant == EST_QUANT_INT8)
        return ft_errorf(err, errlen, "8-bit QLoRA under DeepSpeed ZeRO-3 is not modelled (--quant nf4 is, with "
                                      "bnb_4bit_quant_storage in the compute dtype); use --zero 2");
    if (f == EST_FEAT_LORA && run->zero_stage == 3 && run->quant != EST_QUANT_NONE && run->ds.offload_param_only)
        return ft_errorf(err, errlen, "QLoRA under DeepSpeed ZeRO-3 with offload_param is not modelled");
    if (f == EST_FEAT_LORA && run->zero_stage == 3 && run->quant != EST_QUANT_NONE &&
        run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS)
        return ft_errorf(err, errlen, "QLoRA under DeepSpeed ZeRO-3 with parameter offload is not modelled");
    if (f == EST_FEAT_PARTIAL && run->zero_stage < 3) return not_modelled(run, f, subject, err, errlen);
    /* bitsandbytes' 8-bit AdamW as the client optimizer over the GPU's fp32
     * partitions (seam_deepspeed.c ds_adam_state); not on offloaded ones */
    if (f == EST_FEAT_OPTIMIZER && !(run->optimizer == EST_OPT_ADAMW_8BIT && run->offload == EST_OFFLOAD_NONE))
        return not_modelled(run, f, subject, err, errlen);
    return 0;
}

static void ds_describe(const est_run *r, char *buf, size_t n) {
    snprintf(buf, n, "DeepSpeed ZeRO-%d%s%s%s", r->zero_stage, offload_words(r),
             r->ds.offload_param_only && r->zero_stage == 3 ? ", param offload" : "", ckpt_words(r));
}

static const char *ds_build_note(const est_run *r) {
    if (r->zero_stage != 3) return "";
    if (r->quant != EST_QUANT_NONE) return "; quantized model loaded whole, then partitioned (no zero.Init)";
    return r->zero_init ? "; model built under zero.Init" : "; model built before DeepSpeed (no zero.Init)";
}

/* FSDP's LoRA in one dtype per FlatParameter: fp32, or pure bf16 with the adapters
 * in bf16; FSDP1 with the adapters in the layer's unit cannot flatten fp32
 * adapters with a bf16 base (_flat_param.py _validate_tensors_to_flatten: "Must
 * flatten tensors with uniform dtype"), nor 4-bit codes that require no grad. */
static int fsdp_lora_dtypes(const est_run *run, char *err, size_t errlen) {
    if (run->precision == EST_PREC_BF16 && !run->lora.base_dtype)
        return ft_errorf(err, errlen, "pure bf16 LoRA under FSDP is modelled with bf16 adapters (--lora-dtype "
                                      "bf16); PEFT's fp32 adapters without a MixedPrecision policy are not");
    if (run->fsdp_version != EST_FSDP1 || run->fsdp_lora_wrap != EST_FSDP_LORA_WRAP_LAYER) return 0;
    if (est_has_master(run->precision))
        return ft_errorf(err, errlen, "--fsdp-lora-wrap layer under FSDP1 is modelled in one dtype (--precision "
                                      "fp32, or bf16 with --lora-dtype bf16), not under mixed precision");
    if (run->quant != EST_QUANT_NONE)
        return ft_errorf(err, errlen, "QLoRA with --fsdp-lora-wrap layer under FSDP1 is not modelled");
    if (run->offload != EST_OFFLOAD_NONE)
        return ft_errorf(err, errlen, "CPU offload with --fsdp-lora-wrap layer under FSDP1 is not modelled");
    return 0;
}

/* FSDP's LoRA: FULL_SHARD (with or without parameter offload), no fused
 * projections. A mixture of experts' adapters are modelled (transformers 4.x: one per
 * expert Linear, PEFT's lambda policy making each its own FSDP unit; the E adapters of
 * one projection are one tensor of E copies in the block description, so one unit here:
 * seam_fsdp.c). */
static int fsdp_limits(const est_run *run, est_fw_feature f, const char *subject, char *err,
                       size_t errlen) {
    (void)subject;
    if (f == EST_FEAT_TP && run->fsdp_version != EST_FSDP2)
        return ft_errorf(err, errlen, "--tp is modelled on FSDP2 (torchtitan's fully_shard over the data-"
                                      "parallel mesh); add --fsdp-version 2");
    if (f != EST_FEAT_LORA) return 0;
    const ft_model *m = &run->model;
    if (m->fused_qkv)
        return ft_errorf(err, errlen, "LoRA on %s's fused projections is not modelled under FSDP",
                         ft_arch_name(m->arch));
    if (run->zero_stage != 3)
        return ft_errorf(err, errlen, "LoRA with FSDP is modelled for FULL_SHARD (--zero 3)");
    /* FSDP1 flattens floating-point tensors only (torch 2.11 _flat_param.py
     * _validate_tensors_to_flatten); LLM.int8's weights are int8 and, unlike
     * NF4's codes (bnb_4bit_quant_storage), have no floating storage */
    if (run->quant == EST_QUANT_INT8 && run->fsdp_version != EST_FSDP2)
        return ft_errorf(err, errlen, "--quant int8 does not run under FSDP1: it flattens only floating-point "
                                      "parameters (\"Cannot flatten integer dtype tensors\") and LLM.int8 keeps "
                                      "its weights in int8; use --quant nf4");
    return fsdp_lora_dtypes(run, err, errlen);
}

static void fsdp_describe(const est_run *r, char *buf, size_t n) {
    char tp[48] = "";
    if (r->tp > 1) /* --tp: torchtitan's 2-D mesh (model/tp.h) */
        snprintf(tp, sizeof tp, ", TP %lld x DP %lld", (long long)r->tp, (long long)est_run_dp(r));
    /* FSDP2 has no strategy names: fully_shard's reshard_after_forward is what --zero 3/2 says. */
    const char *layout = r->fsdp_version == EST_FSDP2
                             ? (r->zero_stage == 3   ? "2 (fully_shard, reshard after forward)"
                                : r->zero_stage == 2 ? "2 (fully_shard, no reshard after forward)"
                                                     : "2 (fully_shard, one rank)")
                         : r->zero_stage == 3 ? "FULL_SHARD"
                         : r->zero_stage == 2 ? "SHARD_GRAD_OP"
                                              : "NO_SHARD";
    snprintf(buf, n, "FSDP %s%s%s%s%s", layout, tp,
             r->fsdp_wrap == EST_FSDP_WRAP_MOE_BLOCK ? ", MoE blocks as units" : "", offload_words(r),
             ckpt_words(r));
}

/* ftrain implements the Llama family's blocks only. */
static int ftrain_limits(const est_run *run, est_fw_feature f, const char *subject, char *err,
                         size_t errlen) {
    (void)subject;
    const ft_model *m = &run->model;
    if (f == EST_FEAT_ARCH && !ft_model_is_llama_family(m))
        return ft_errorf(err, errlen, "ftrain implements Llama, Mistral and Qwen2 blocks, not %s (%s); "
                                      "use --framework hf, deepspeed or fsdp",
                         m->name, ft_arch_name(m->arch));
    return 0;
}

static void ftrain_describe(const est_run *r, char *buf, size_t n) {
    snprintf(buf, n, "ftrain ZeRO-%d%s%s", r->zero_stage, offload_words(r), ckpt_words(r));
}

#define NO EST_OFFLOAD_NONE
#define OPT EST_OFFLOAD_OPTIMIZER
#define ALL EST_OFFLOAD_OPTIMIZER_PARAMS
#define NONE EST_CKPT_NONE
#define FULL EST_CKPT_FULL

/* DeepSpeed's alternatives start from DDP (the HF Trainer without it). */
static const est_fw_strategy DEEPSPEED_STRATEGIES[] = {
    {"DDP", EST_FW_HF, 0, NO, NONE},
    {"ZeRO-1", EST_FW_DEEPSPEED, 1, NO, NONE},
    {"ZeRO-2", EST_FW_DEEPSPEED, 2, NO, NONE},
    {"ZeRO-3", EST_FW_DEEPSPEED, 3, NO, NONE},
    {"DDP + ckpt", EST_FW_HF, 0, NO, FULL},
    {"ZeRO-1 + ckpt", EST_FW_DEEPSPEED, 1, NO, FULL},
    {"ZeRO-2 + ckpt", EST_FW_DEEPSPEED, 2, NO, FULL},
    {"ZeRO-3 + ckpt", EST_FW_DEEPSPEED, 3, NO, FULL},
    {"ZeRO-2 + offload", EST_FW_DEEPSPEED, 2, OPT, NONE},
    {"ZeRO-3 + offload", EST_FW_DEEPSPEED, 3, OPT, NONE},
    {"ZeRO-2 + offload + ckpt", EST_FW_DEEPSPEED, 2, OPT, FULL},
    {"ZeRO-3 + offload + ckpt", EST_FW_DEEPSPEED, 3, OPT, FULL},
    {"ZeRO-3 + offload all + ckpt", EST_FW_DEEPSPEED, 3, ALL, FULL},
    {NULL, EST_FW_DEEPSPEED, 0, NO, NONE},
};

static const est_fw_strategy FSDP_STRATEGIES[] = {
    {"NO_SHARD", EST_FW_FSDP, 0, NO, NONE},
    {"SHARD_GRAD_OP", EST_FW_FSDP, 2, NO, NONE},
    {"FULL_SHARD", EST_FW_FSDP, 3, NO, NONE},
    {"NO_SHARD + ckpt", EST_FW_FSDP, 0, NO, FULL},
    {"SHARD_GRAD_OP + ckpt", EST_FW_FSDP, 2, NO, FULL},
    {"FULL_SHARD + ckpt", EST_FW_FSDP, 3, NO, FULL},
    {"FULL_SHARD + offload + ckpt", EST_FW_FSDP, 3, ALL, FULL},
    {NULL, EST_FW_FSDP, 0, NO, NONE},
};

/* FSDP2 (fully_shard) has no NO_SHARD and no strategy names: what --zero 3/2
 * picks is reshard_after_forward True/False. */
static const est_fw_strategy FSDP2_STRATEGIES[] = {
    {"no reshard", EST_FW_FSDP, 2, NO, NONE},
    {"reshard", EST_FW_FSDP, 3, NO, NONE},
    {"no reshard + ckpt", EST_FW_FSDP, 2, NO, FULL},
    {"reshard + ckpt", EST_FW_FSDP, 3, NO, FULL},
    {"reshard + offload + ckpt", EST_FW_FSDP, 3, ALL, FULL},
    {NULL, EST_FW_FSDP, 0, NO, NONE},
};

static const est_fw_strategy HF_STRATEGIES[] = {
    {"DDP", EST_FW_HF, 0, NO, NONE},
    {"DDP + ckpt", EST_FW_HF, 0, NO, FULL},
    {NULL, EST_FW_HF, 0, NO, NONE},
};

static const est_fw_strategy FTRAIN_STRATEGIES[] = {
    {"ZeRO-0", EST_FW_FTRAIN, 0, NO, NONE},
    {"ZeRO-1", EST_FW_FTRAIN, 1, NO, NONE},
    {"ZeRO-2", EST_FW_FTRAIN, 2, NO, NONE},
    {"ZeRO-3", EST_FW_FTRAIN, 3, NO, NONE},
    {"ZeRO-3 + selective", EST_FW_FTRAIN, 3, NO, EST_CKPT_SELECTIVE},
    {"ZeRO-3 + full ckpt", EST_FW_FTRAIN, 3, NO, FULL},
    {"ZeRO-3 + offload + ckpt", EST_FW_FTRAIN, 3, OPT, FULL},
    {NULL, EST_FW_FTRAIN, 0, NO, NONE},
};

static const est_fw_info FW_HF = {
    .autocast_over_master = true,
    .kbit_prepare_fp32 = true,
    .torch_stack = true,
    .caching_allocator = true,
    .features = FEAT(EST_FEAT_LORA) | FEAT(EST_FEAT_PEFT_METHOD) | FEAT(EST_FEAT_PLAIN_LOOP) |
                FEAT(EST_FEAT_OPTIMIZER) | FEAT(EST_FEAT_RL) | FEAT(EST_FEAT_MODULES_TO_SAVE) |
                FEAT(EST_FEAT_NON_REENTRANT) | FEAT(EST_FEAT_SDPA) | FEAT(EST_FEAT_FP16_MIXED) |
                FEAT(EST_FEAT_ARCH) | FEAT(EST_FEAT_HF_ONLY_STACK) |
                FEAT(EST_FEAT_SINGLE_DEVICE) | FEAT(EST_FEAT_FP8) | FEAT(EST_FEAT_CKPT_POLICY) | FEAT(EST_FEAT_COMPILE) |
                FEAT(EST_FEAT_PARTIAL) | FEAT(EST_FEAT_LORA_BF16) | FEAT(EST_FEAT_FUSED_ADAMW) |
                FEAT(EST_FEAT_CHUNKED_OUTPUT),
    .attention_default = -1,
    .sharded_by = EST_FW_DEEPSPEED,
    .strategies = HF_STRATEGIES,
    .describe = hf_describe,
    .build_note = no_note,
};

static const est_fw_info FW_DEEPSPEED = {
    .adapters_in_compute_dtype = true, /* engine.py: module.bfloat16() casts the adapters */
    .torch_stack = true,
    .caching_allocator = true,
    .zero_grad_copy = true,
    /* the world group and its clone: deepspeed/utils/groups.py (0.16.5)
     * _get_data_parallel_group -> _clone_world_group, dist.new_group over all
     * ranks; the Trainer's barriers use the world group */
    .nccl_communicators = 2,
    .features = FEAT(EST_FEAT_LORA) | FEAT(EST_FEAT_RL) | FEAT(EST_FEAT_NON_REENTRANT) | FEAT(EST_FEAT_ZERO) |
                FEAT(EST_FEAT_ZERO1) | FEAT(EST_FEAT_OFFLOAD) | FEAT(EST_FEAT_OFFLOAD_OPTIMIZER) |
                FEAT(EST_FEAT_SDPA) | FEAT(EST_FEAT_FP16_MIXED) | FEAT(EST_FEAT_ARCH) |
                FEAT(EST_FEAT_DEEPSPEED_CONFIG) | FEAT(EST_FEAT_COMPILE) | FEAT(EST_FEAT_PARTIAL) | FEAT(EST_FEAT_OPTIMIZER) |
                FEAT(EST_FEAT_FUSED_ADAMW), /* the Trainer's AdamW as client optimizer (seam_deepspeed_optim.c) */
    .attention_default = -1,
    .limits = ds_limits,
    .sharded_by = EST_FW_DEEPSPEED,
    .strategies = DEEPSPEED_STRATEGIES,
    .describe = ds_describe,
    .build_note = ds_build_note,
};

static const est_fw_info FW_FSDP = {
    .adapters_in_compute_dtype = true,
    .torch_stack = true,
    .caching_allocator = true,
    .memory_by_node = true,
    .features = FEAT(EST_FEAT_LORA) | FEAT(EST_FEAT_ZERO) | FEAT(EST_FEAT_OFFLOAD) |
                FEAT(EST_FEAT_OFFLOAD_SGD) | FEAT(EST_FEAT_SDPA) | FEAT(EST_FEAT_FP16_MIXED) |
                FEAT(EST_FEAT_ARCH) | FEAT(EST_FEAT_NON_REENTRANT) | FEAT(EST_FEAT_FP8) |
                FEAT(EST_FEAT_FP8_ALL_GATHER) | FEAT(EST_FEAT_CKPT_POLICY) | FEAT(EST_FEAT_COMPILE) | FEAT(EST_FEAT_TP) |
                FEAT(EST_FEAT_LORA_BF16) | FEAT(EST_FEAT_FSDP_OPTIONS) | FEAT(EST_FEAT_LOAD_DTYPE) |
                FEAT(EST_FEAT_FUSED_ADAMW) | FEAT(EST_FEAT_CHUNKED_OUTPUT), /* torch's AdamW over the shards (seam_fsdp.c) */
    .attention_default = -1,
    .limits = fsdp_limits,
    .sharded_by = EST_FW_FSDP,
    .strategies = FSDP_STRATEGIES,
    /* accelerate's fsdp_config names: FULL_SHARD shards what ZeRO-3 does, and
     * its CPU offload moves parameters with their gradients and optimizer state. */
    .zero3_label = "FULL_SHARD (shard weights too)",
    .offload_all_label = "offload parameters to the CPU (FULL_SHARD with CPU offload)",
    .describe = fsdp_describe,
    .build_note = no_note,
};

static const est_fw_info FW_FTRAIN = {
    .own_time_profile = true,
    .cpu_device = true,
    .attention_default = EST_ATTN_FLASH,
    .features = FEAT(EST_FEAT_ZERO) | FEAT(EST_FEAT_ZERO1) | FEAT(EST_FEAT_OFFLOAD) |
                FEAT(EST_FEAT_OFFLOAD_OPTIMIZER) | FEAT(EST_FEAT_OFFLOAD_SGD) |
                FEAT(EST_FEAT_CKPT_SELECTIVE) | FEAT(EST_FEAT_ARCH),
    .limits = ftrain_limits,
    .sharded_by = EST_FW_FTRAIN,
    .strategies = FTRAIN_STRATEGIES,
    .describe = ftrain_describe,
    .build_note = no_note,
};

/* The framework est_run_defaults gives a run (DeepSpeed, as before the registry). */
est_framework est_fw_default(void) { return EST_FW_DEEPSPEED; }

est_framework est_fw_trainer(void) { return EST_FW_HF; }

bool est_fw_stream_ordered_frees(const est_run *run) {
    return run->framework == EST_FW_DEEPSPEED && run->zero_stage == 3 && est_run_world(run) > 1;
}

size_t est_fw_all(const est_framework **out) {
    static const est_framework FRAMEWORKS[] = {EST_FW_FTRAIN, EST_FW_HF, EST_FW_DEEPSPEED, EST_FW_FSDP};
    *out = FRAMEWORKS;
    return sizeof FRAMEWORKS / sizeof FRAMEWORKS[0];
}

const est_fw_info *est_fw_of(const est_run *run) { return est_fw_info_of(run->framework); }

const est_fw_info *est_fw_info_of(est_framework fw) {
    switch (fw) {
    case EST_FW_HF: return &FW_HF;
    case EST_FW_DEEPSPEED: return &FW_DEEPSPEED;
    case EST_FW_FSDP: return &FW_FSDP;
    case EST_FW_FTRAIN: return &FW_FTRAIN;
    }
    return &FW_FTRAIN;
}

int est_fw_models(const est_run *run, est_fw_feature f, const char *subject, char *err,
                  size_t errlen) {
    const est_fw_info *fw = est_fw_of(run);
    if (!(fw->features & FEAT(f))) return not_modelled(run, f, subject, err, errlen);
    /* adapters kept in bf16: the FSDP and HF seams' regimes model them */
    if (f == EST_FEAT_LORA && run->lora.base_dtype && !(fw->features & FEAT(EST_FEAT_LORA_BF16)))
        return not_modelled(run, EST_FEAT_LORA_BF16, subject, err, errlen);
    if (f == EST_FEAT_LORA && run->lora.base_dtype && run->precision != EST_PREC_BF16)
        return ft_errorf(err, errlen, "--lora-dtype bf16 is modelled with --precision bf16 (pure bf16)");
    return fw->limits ? fw->limits(run, f, subject, err, errlen) : 0;
}

int est_fw_first_stage(const est_run *run, est_fw_feature f) {
    est_run probe = *run;
    char err[8];
    for (int z = 0; z <= 3; z++) {
        probe.zero_stage = z;
        if (est_fw_models(&probe, f, NULL, err, sizeof err) == 0) return z;
    }
    return -1;
}

bool est_fw_has(const est_run *run, est_fw_feature f) {
    return (est_fw_of(run)->features & FEAT(f)) != 0;
}

const char *est_fw_describe(const est_run *run, char *buf, size_t n) {
    est_fw_of(run)->describe(run, buf, n);
    return buf;
}

const est_fw_strategy *est_fw_strategies_of_run(const est_run *run) {
    if (run->framework == EST_FW_FSDP && run->fsdp_version == EST_FSDP2) return FSDP2_STRATEGIES;
    return est_fw_info_of(run->framework)->strategies;
}
