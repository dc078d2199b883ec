#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "liger.h"
#include "kernels.h"
#include "lora.h"
#include "objective.h"
#include "optimizers.h"
#include "peft.h"
#include "quant.h"
#include "fp8.h"
#include "tp.h"
#include "trainable.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

void est_run_defaults(est_run *run, const ft_model *model, const est_gpu *gpu) {
    memset(run, 0, sizeof *run);
    run->ds.reduce_bucket_elems = run->ds.prefetch_bucket_elems = EST_DS_UNSET;
    run->ds.persistence_elems = run->ds.sub_group_elems = EST_DS_UNSET;
    run->ds.train_batch = EST_DS_UNSET;
    run->ds.allgather_bucket_elems = run->ds.max_live_elems = EST_DS_UNSET;
    run->ds.max_reuse_distance_elems = EST_DS_UNSET;
    run->ds.replaced_optimizer = -1;
    run->model = *model;
    run->layers_used = model->num_layers;
    if (gpu) run->gpu = *gpu;
    run->gpus_per_node = 1;
    run->nodes = 1;
    run->rank = -1;
    run->micro_batch = 1;
    run->grad_accum = 1;
    run->seq_len = 2048;
    if (model->max_position > 0 && run->seq_len > model->max_position)
        run->seq_len = model->max_position;
    run->precision = EST_PREC_BF16_MIXED;
    run->zero_stage = 0;
    run->offload = EST_OFFLOAD_NONE;
    run->checkpointing = EST_CKPT_NONE;
    run->attention = EST_ATTN_SDPA; /* transformers' default since 4.36 */
    run->loss = EST_LOSS_STANDARD;
    run->optimizer = EST_OPT_ADAMW;
    run->framework = est_fw_default();
    run->expandable_segments = false;
    run->stack = est_stack_default();
    run->zero_init = true; /* a current HF Trainer script parses TrainingArguments first */
    est_lora_defaults(&run->lora);
    /* peft 0.14 has no default targets for phi3 (utils/constants.py
     * TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING lacks it: the user
     * names them); q,v's counterpart there is the one qkv_proj */
    if (model->fused_qkv) run->lora.targets = EST_LORA_BIT(EST_LORA_Q);
    run->quant = EST_QUANT_NONE;
    run->double_quant = true; /* the QLoRA paper's recipe (bnb_4bit_use_double_quant=True) */
    run->quant_compute = EST_CDT_AUTO;
    run->tight_margin_frac = EST_TIGHT_MARGIN_DEFAULT;
    est_ia3_defaults(model, &run->ia3_targets, &run->ia3_feedforward); /* used under --peft ia3 */
    run->pdelta.targets = EST_LORA_DEFAULT_TARGETS; /* the method comparison's q_proj, v_proj */
    run->pdelta.factor = -1;                        /* LoKrConfig.decompose_factor's default */
}

/* Beside the bounds in run_desc.h, the worst single term below is checked in double
 * precision before any int64 math. */
#define MAX_BYTES_DOUBLE 1.15e18 /* 2^60: one exbibyte; nothing real comes close */

/* Each count within the bounds of run.h and the model. */
static int validate_bounds(const est_run *run, char *err, size_t errlen) {
    const ft_model *m = &run->model;
    if (run->gpus_per_node < 1 || run->gpus_per_node > EST_MAX_GPUS_PER_NODE)
        return ft_errorf(err, errlen, "--gpus must be between 1 and %d (got %lld)", EST_MAX_GPUS_PER_NODE,
                         (long long)run->gpus_per_node);
    if (run->nodes < 1 || run->nodes > EST_MAX_NODES)
        return ft_errorf(err, errlen, "--nodes must be between 1 and %d (got %lld)", EST_MAX_NODES,
                         (long long)run->nodes);
    if (run->micro_batch < 1 || run->micro_batch > EST_MAX_BATCH)
        return ft_errorf(err, errlen, "--batch must be between 1 and %d (got %lld)", EST_MAX_BATCH,
                         (long long)run->micro_batch);
    if (run->grad_accum < 1 || run->grad_accum > EST_MAX_ACCUM)
        return ft_errorf(err, errlen, "--grad-accum must be between 1 and %d (got %lld)", EST_MAX_ACCUM,
                         (long long)run->grad_accum);
    if (run->seq_len < 1 || run->seq_len > EST_MAX_SEQ)
        return ft_errorf(err, errlen, "--seq must be between 1 and %lld (got %lld)",
                         (long long)EST_MAX_SEQ, (long long)run->seq_len);
    /* Packed rows restart their positions at every sample: the longest
     * sample, not the row, meets the model's limit. */
    const int64_t positions = run->packed && run->packed_sample_len > 0 ? run->packed_sample_len : run->seq_len;
    if (m->max_position > 0 && positions > m->max_position)
        return ft_errorf(err, errlen, "--%s %lld is above %s's maximum of %lld positions",
                         positions == run->seq_len ? "seq" : "packed-sample-len", (long long)positions, m->name,
                         (long long)m->max_position);
    if (run->layers_used < 1 || run->layers_used > m->num_layers)
        return ft_errorf(err, errlen, "layers must be between 1 and %lld (got %lld)",
                         (long long)m->num_layers, (long long)run->layers_used);
    if (run->zero_stage < 0 || run->zero_stage > 3)
        return ft_errorf(err, errlen, "--zero must be 0, 1, 2 or 3 (got %d)", run->zero_stage);
    return 0;
}

/* Sharding and offload combinations a framework has no equivalent for
 * (fw_registry.c says which). */
static int validate_sharding(const est_run *run, char *err, size_t errlen) {
    if (run->zero_stage > 0 && est_fw_models(run, EST_FEAT_ZERO, NULL, err, errlen) < 0) return -1;
    if (run->offload != EST_OFFLOAD_NONE && est_fw_models(run, EST_FEAT_OFFLOAD, NULL, err, errlen) < 0)
        return -1;
    if (run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS && run->zero_stage != 3)
        return ft_errorf(err, errlen, "--offload optimizer+params needs --zero 3 (parameters are "
                                      "only partitioned, hence offloadable, at stage 3)");
    if (run->offload == EST_OFFLOAD_OPTIMIZER && run->zero_stage == 0)
        return ft_errorf(err, errlen, "--offload optimizer needs --zero 1, 2 or 3");
    if (run->zero_stage == 1 && est_fw_models(run, EST_FEAT_ZERO1, NULL, err, errlen) < 0) return -1;
    if (run->offload == EST_OFFLOAD_OPTIMIZER &&
        est_fw_models(run, EST_FEAT_OFFLOAD_OPTIMIZER, NULL, err, errlen) < 0)
        return -1;
    if (run->optimizer == EST_OPT_SGD && run->offload != EST_OFFLOAD_NONE &&
        est_fw_models(run, EST_FEAT_OFFLOAD_SGD, NULL, err, errlen) < 0)
        return -1;
    return 0;
}

/* Op-level selective checkpointing, every N-th block, torch.compile. */
static int validate_ckpt_policy(const est_run *run, char *err, size_t errlen) {
    if (run->ckpt_every < 0 || run->ckpt_every > FT_MAX_LAYERS)
        return ft_errorf(err, errlen, "--ckpt-every must be between 1 and %lld", (long long)FT_MAX_LAYERS);
    if (run->ckpt_every > 1 && !est_run_ckpt_wraps(run))
        return ft_errorf(err, errlen, "--ckpt-every applies to --checkpointing full or selective-op");
    if (run->checkpointing == EST_CKPT_SELECTIVE_OP && run->model.num_experts > 0)
        return ft_errorf(err, errlen, "--checkpointing selective-op is not modelled for MoE blocks (the "
                                      "policy counts each expert's mm calls)");
    if ((run->checkpointing == EST_CKPT_SELECTIVE_OP || run->ckpt_every > 1) &&
        est_fw_models(run, EST_FEAT_CKPT_POLICY, NULL, err, errlen) < 0)
        return -1;
    if (run->compiled && est_fw_models(run, EST_FEAT_COMPILE, NULL, err, errlen) < 0) return -1;
    if (run->compiled && run->quant != EST_QUANT_NONE)
        return ft_errorf(err, errlen, "--compile with --quant is not modelled (bitsandbytes' kernels are "
                                      "custom ops the graph runs around)");
    return 0;
}

/* What each framework implements: checkpointing, precision, attention, blocks,
 * adapters, optimizers, quantization and the single-device recipes. */
static int validate_framework_support(const est_run *run, char *err, size_t errlen) {
    if (run->checkpointing == EST_CKPT_SELECTIVE &&
        est_fw_models(run, EST_FEAT_CKPT_SELECTIVE, NULL, err, errlen) < 0)
        return -1;
    if (validate_ckpt_policy(run, err, errlen) < 0) return -1;
    if (run->precision == EST_PREC_FP16_MIXED && est_fw_models(run, EST_FEAT_FP16_MIXED, NULL, err, errlen) < 0)
        return -1;
    if (run->attention == EST_ATTN_SDPA && est_fw_models(run, EST_FEAT_SDPA, NULL, err, errlen) < 0) return -1;
    if (est_fw_models(run, EST_FEAT_ARCH, NULL, err, errlen) < 0) return -1;
    if (est_lora_validate(run, err, errlen) < 0 || est_peft_validate(run, err, errlen) < 0) return -1;
    if (run->stack && run->stack->hf_only &&
        est_fw_models(run, EST_FEAT_HF_ONLY_STACK, run->stack->name, err, errlen) < 0)
        return -1;
    if (est_optimizer_validate(run, err, errlen) < 0) return -1;
    if (est_quant_validate(run, err, errlen) < 0) return -1;
    if (est_fp8_validate(run, err, errlen) < 0) return -1;
    if (est_objective_validate(run, err, errlen) < 0) return -1;
    if (est_kernels_validate(run, err, errlen) < 0) return -1;
    if (est_tp_validate(run, err, errlen) < 0) return -1;
    if ((run->optimizer_in_backward || run->activation_offload) &&
        est_fw_models(run, EST_FEAT_SINGLE_DEVICE, NULL, err, errlen) < 0)
        return -1;
    if (run->trainable.n > 0 && (est_fw_models(run, EST_FEAT_PARTIAL, NULL, err, errlen) < 0 ||
                                 est_trainable_count(run, NULL, NULL, err, errlen) < 0))
        return -1;
    /* torchtune's chunked output reads the LM head 8 times; only the HF and
     * FSDP seams sum those uses into one gradient as autograd does */
    if (run->loss == EST_LOSS_CHUNKED_OUTPUT && est_fw_models(run, EST_FEAT_CHUNKED_OUTPUT, NULL, err, errlen) < 0)
        return -1;
    if (run->optimizer_in_backward && (est_run_world(run) > 1 || run->grad_accum > 1))
        return ft_errorf(err, errlen, "--optimizer-in-backward steps each parameter as its gradient "
                                      "is made: one GPU and --grad-accum 1 only");
    return 0;
}

/* Size sanity in double precision, before any int64 arithmetic: the worst
 * single term stays below MAX_BYTES_DOUBLE. */
static int validate_size(const est_run *run, char *err, size_t errlen) {
    const ft_model *m = &run->model;
    double tokens = (double)run->micro_batch * (double)run->seq_len;
    double L = (double)run->layers_used, h = (double)m->hidden_size, V = (double)m->vocab_size;
    double ff = (double)m->intermediate_size, heads = (double)m->num_heads;
    if (m->num_experts > 0) /* every expert is resident; k experts' activations per token */
        ff = (double)m->num_experts * (double)m->moe_intermediate_size +
             (double)m->shared_expert_intermediate_size;
    double params = V * h * 2 + L * (4 * h * heads * (double)m->head_dim + 3 * h * ff);
    double worst[] = {
        params * 24,                                        /* model states and transients */
        tokens * V * 24,                                    /* logits and their gradients */
        tokens * L * (64 * h + 16 * ff + 16 * heads * (double)m->head_dim), /* activations */
        (double)run->micro_batch * heads * (double)run->seq_len * (double)run->seq_len * 16, /* scores */
    };
    for (int i = 0; i < COUNT(worst); i++)
        if (!(worst[i] < MAX_BYTES_DOUBLE))
            return ft_errorf(err, errlen,
                             "this run needs more than an exbibyte per GPU; check --batch and --seq");
    return 0;
}

int est_run_validate(const est_run *run, char *err, size_t errlen) {
    if (validate_bounds(run, err, errlen) < 0 || validate_sharding(run, err, errlen) < 0 ||
        validate_framework_support(run, err, errlen) < 0 || validate_size(run, err, errlen) < 0)
        return -1;
    /* Liger's kernels against the model (liger.h); its fused linear
     * cross-entropy is the chunked loss, which runs beside no other. */
    if (est_liger_check(&run->model, run->liger, err, errlen) < 0) return -1;
    if ((run->liger & EST_LIGER_CROSS_ENTROPY) && run->loss == EST_LOSS_CHUNKED)
        return ft_errorf(err, errlen, "--liger cross_entropy and --loss chunked (the fused linear "
                                      "cross-entropy) cannot both be on");
    if ((run->liger & EST_LIGER_CROSS_ENTROPY) && run->rl != EST_RL_NONE)
        return ft_errorf(err, errlen, "--liger cross_entropy under a preference objective is not modelled");
    return 0;
}
