#include "stack.h"

#include <string.h>

#include "json_util.h"

/* Each stack is a set of versions that were current together. The first is
 * the one pinned by the public Llama-3-8B / Qwen1.5-0.5B experiments
 * (shared/data/gpjt-*: torch 2.2.2, transformers 4.40.0, deepspeed 0.14.2,
 * accelerate 0.29.3); the second the releases of February 2025, the newest
 * whose source this project has read term by term; the third the versions of
 * PEFT's method comparison, read for the modeling code, PEFT and torch only
 * (no DeepSpeed, no accelerate). */
/* The switches of the two November 2026 stacks, the CPU traces' (torch 2.15,
 * transformers 5.23) and the GPU image's (torch 2.11, transformers 5.17): both
 * run DeepSpeed 0.19.8 and accelerate 1.15, and every transformers and torch
 * switch below reads the same in both pairs (each flag's source is in
 * stack.h), so one list serves both and a new switch reaches both. */
#define SWITCHES_2026_11                                                                  \
    .per_layer_rope_cache = false, .rope_once_per_forward = true,                         \
    .fsdp_upcasts_low_precision_params = true, .ds_cpu_adam_pinned_tiles = false,          \
    .ds_overflow_check_reduces = true, .torch_has_fully_shard = true,                      \
    .fsdp2_one_rank_skips_gather = true, .kv_cache_copies = true, .sdpa_gqa_unmasked = true, \
    .sdpa_prefers_cudnn = true,                                                            \
    .loss_shifts_labels = true, .ds_flatten_on_device = true,                              \
    .ds_linear_wrap_without_init = true,                                                  \
    .ds_buckets_at_first_grad = true, .ds_host_ops = true, .moe_experts_fused = true,       \
    .trainer_default_fused = true, .ds_hook_gather_view = true,

static const est_stack STACKS[] = {
    {
        .name = "2024-04",
        .torch = "2.2.2", .transformers = "4.40.0", .deepspeed = "0.14.2",
        .accelerate = "0.29.3", .peft = "0.10.0",
        .summary = "the stack of the shared gpjt experiments (April 2024)",
        .peft_adapters_in_base_dtype = true,
        .per_layer_rope_cache = true,
        .rope_once_per_forward = false,
        .fsdp_upcasts_low_precision_params = false,
        .ds_cpu_adam_pinned_tiles = true,
        .torch_has_fully_shard = false,
        .kv_cache_copies = false,
        .sdpa_gqa_unmasked = false,
        .sdpa_prefers_cudnn = false,
        .loss_shifts_labels = false,
    },
    {
        .name = "2025-02",
        .torch = "2.6.0", .transformers = "4.49.0", .deepspeed = "0.16.4",
        .accelerate = "1.4.0", .peft = "0.14.0",
        .summary = "releases of February 2025 (the default)",
        .per_layer_rope_cache = false,
        .rope_once_per_forward = true,
        .fsdp_upcasts_low_precision_params = true,
        .ds_cpu_adam_pinned_tiles = false,
        .torch_has_fully_shard = true,
        .kv_cache_copies = false,
        .sdpa_gqa_unmasked = false,
        .sdpa_prefers_cudnn = false,
        .loss_shifts_labels = true,
    },
    {
        /* The releases current at the end of October 2025 (torch 2.9.0 of
         * 15 Oct, transformers 4.57.1 of 14 Oct, DeepSpeed 0.18.1 of 23 Oct,
         * accelerate 1.11.0 of 20 Oct; PEFT's newest release then 0.17.1, 0.18.0
         * being an rc): the stack of PEFT's Bone rows (torch 2.9.0,
         * transformers 4.57.1) and of much of 2025's published fine-tuning.
         * Each switch read at these versions (tests/stacks.c holds the lines):
         * transformers 4.57.1 models/llama/modeling_llama.py 345/392 (one
         * rotary module, position_embeddings), cache_utils.py 94-95/119-120
         * (DynamicLayer: empty tensor, torch.cat), integrations/
         * sdpa_attention.py 45 (use_gqa_in_sdpa: torch >= 2.5, no mask),
         * loss/loss_utils.py 59-60 (labels padded and shifted),
         * models/mixtral/modeling_mixtral.py 57-63 (one nn.Linear per expert),
         * training_args.py 1292-1297 (adamw_torch_fused from torch 2.8);
         * accelerate 1.11.0 accelerator.py 1961-1962 (FlatParameter upcast),
         * utils/fsdp_utils.py 704-707 (FSDP2: model.to(torch.float32));
         * PEFT 0.17.1 mapping_func.py 36 (autocast_adapter_dtype=True);
         * DeepSpeed 0.18.1 stage_1_and_2.py 359-368 (parameters to the host
         * before flattening), 1521 and 2200-2221 (process_gradients ->
         * backward_prologue allocates the buckets at the first gradient),
         * 878 (epilogue ends in zero_grad, as 0.16.4), 2193-2198
         * (_has_inf_or_nan: float, isnan, isinf, logical_or),
         * partition_parameters.py 1610-1611 (_allgather_params for one),
         * csrc/includes/cpu_adam.h (no cudaMallocHost), no zero3_linear_wrap
         * in engine.py; torch 2.9.0 (git 0fabc3b, the PyPI wheel's
         * torch/version.py) distributed/fsdp/_fully_shard/_fsdp_param_group.py
         * 315-327 and 356-380 (world_size == 1: no foreach_all_gather, the
         * unsharded tensor copied from all_gather_inputs[0]); cuDNN SDPA first
         * on sm90/sm100 from PR #162073 (merged Sept 2025, "for 2.9":
         * sdp_utils.cpp check_prefer_cudnn_attention, CUDNN_VERSION >= 90900,
         * read in the stored main of that month, not at the tag), the x86_64
         * wheel pinning nvidia-cudnn-cu12==9.10.2.21. ds_host_ops stays off:
         * ZeRO's host op counts were read in 0.19.8 only. */
        .name = "2025-10",
        .torch = "2.9.0", .transformers = "4.57.1", .deepspeed = "0.18.1",
        .accelerate = "1.11.0", .peft = "0.17.1",
        .summary = "releases of October 2025 (PEFT's Bone rows)",
        .per_layer_rope_cache = false,
        .rope_once_per_forward = true,
        .fsdp_upcasts_low_precision_params = true,
        .fsdp2_upcasts_whole_model = true, /* accelerate 1.11.0 utils/fsdp_utils.py 704-707 */
        .peft_adapters_in_base_dtype = false,
        .ds_cpu_adam_pinned_tiles = false,
        .torch_has_fully_shard = true,
        .fsdp2_one_rank_skips_gather = true,
        .kv_cache_copies = true,
        .sdpa_gqa_unmasked = true,
        .sdpa_prefers_cudnn = true,
        .loss_shifts_labels = true,
        .ds_linear_wrap_without_init = false,
        .ds_buckets_at_first_grad = true,
        .ds_flatten_on_device = false,
        .ds_overflow_check_reduces = false,
        .ds_hook_gather_view = false,
        .ds_host_ops = false,
        .moe_experts_fused = false,
        .trainer_default_fused = true,
        .hf_only = false,
    },
    {
        /* The stack of PEFT's method comparison records
         * (shared/data/peft-metamathqa-l40s: 64 of its 66 rows). Read term by
         * term for the PyTorch Trainer-free path only: --framework hf. */
        .name = "2026-07",
        .torch = "2.13.0", .transformers = "5.13.1", .deepspeed = "-",
        .accelerate = "-", .peft = "0.19.2",
        .summary = "PEFT's method comparison (July 2026): --framework hf only",
        .per_layer_rope_cache = false,
        .rope_once_per_forward = true,
        .fsdp_upcasts_low_precision_params = true,
        .ds_cpu_adam_pinned_tiles = false,
        .torch_has_fully_shard = true,
        .fsdp2_one_rank_skips_gather = true,
        .kv_cache_copies = true,
        .sdpa_gqa_unmasked = true,
        .sdpa_prefers_cudnn = true,
        .loss_shifts_labels = true,
        .moe_experts_fused = true,
        .trainer_default_fused = true, /* transformers 5.13.1 >= 4.54, torch 2.13 >= 2.8 */
        .hf_only = true,
    },
    {
        /* The stack `make cpu-truth` pins (calibrate/probes/
         * cpu-truth-requirements.txt), of the cpu-trace records. Its
         * transformers/torch terms are those of 2026-07 (read for the
         * modeling code and torch); DeepSpeed 0.19.8 read for the ZeRO-3
         * linear only. */
        .name = "2026-11",
        .torch = "2.15.0", .transformers = "5.23.0", .deepspeed = "0.19.8",
        .accelerate = "1.15.0", .peft = "0.21.2",
        .summary = "the CPU framework traces' stack (November 2026)",
        SWITCHES_2026_11
    },
    {
        /* The GPU image of the first GPU day (calibrate/gpu-days/
         * 2026-11-26-h200: torch 2.11.0+cu130, transformers 5.17.0, DeepSpeed
         * 0.19.8, accelerate 1.15.0, peft 0.21.0), so that its records are
         * estimated for what ran, not for the default 4.49. DeepSpeed and
         * accelerate are 2026-11's; the transformers switches read in 5.17.0
         * (the /tmp/probe-venv wheel): integrations/sdpa_attention.py
         * use_gqa_in_sdpa (enable_gqa, no repeat_kv, when unmasked),
         * loss/loss_utils.py ForCausalLMLoss (labels padded and shifted),
         * cache_utils.py DynamicLayer.update (torch.cat), modeling_mixtral.py
         * MixtralExperts (3D parameters) with "grouped_mm" the default
         * experts_implementation (modeling_utils.py); torch 2.11 >= 2.9 for
         * the one-rank FSDP2 path (PR #160135). */
        .name = "2026-11-gpu",
        .torch = "2.11.0", .transformers = "5.17.0", .deepspeed = "0.19.8",
        .accelerate = "1.15.0", .peft = "0.21.0",
        .summary = "the GPU image of the H200 day (November 2026)",
        SWITCHES_2026_11
    },
};
#define NSTACKS (sizeof STACKS / sizeof STACKS[0])

const est_stack *est_stack_find(const char *name) {
    for (size_t i = 0; i < NSTACKS; i++)
        if (name && strcmp(name, STACKS[i].name) == 0) return &STACKS[i];
    return NULL;
}

/* `listed` names `version`: equal up to a local suffix ("2.15.0+cpu"). */
static bool same_version(const cJSON *listed, const char *key, const char *version) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(listed, key);
    if (!cJSON_IsString(v) || !v->valuestring) return false;
    const size_t n = strlen(version);
    return strncmp(v->valuestring, version, n) == 0 && (v->valuestring[n] == '\0' || v->valuestring[n] == '+');
}

const est_stack *est_stack_of_versions(const cJSON *listed) {
    if (!cJSON_IsObject(listed)) return NULL;
    for (size_t i = 0; i < NSTACKS; i++)
        if (same_version(listed, "torch", STACKS[i].torch) &&
            same_version(listed, "transformers", STACKS[i].transformers) &&
            same_version(listed, "deepspeed", STACKS[i].deepspeed))
            return &STACKS[i];
    return NULL;
}

const est_stack *est_stack_default(void) { return est_stack_find(EST_DEFAULT_STACK); }

int est_stack_parse(const char *name, const est_stack **out, char *err, size_t errlen) {
    const est_stack *s = est_stack_find(name);
    if (!s) {
        char names[128] = "";
        for (size_t i = 0; i < NSTACKS; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, STACKS[i].name, sizeof names - strlen(names) - 1);
        }
        return ft_errorf(err, errlen, "--stack: unknown stack \"%s\" (choose one of: %s; see `ftest stacks`)",
                         name ? name : "", names);
    }
    *out = s;
    return 0;
}

void est_stacks_print(FILE *out) {
    fprintf(out, "%-11s %-7s %-13s %-10s %-11s %-6s  %s\n", "stack", "torch", "transformers",
            "deepspeed", "accelerate", "peft", "");
    for (size_t i = 0; i < NSTACKS; i++) {
        const est_stack *s = &STACKS[i];
        fprintf(out, "%-11s %-7s %-13s %-10s %-11s %-6s  %s\n", s->name, s->torch, s->transformers,
                s->deepspeed, s->accelerate, s->peft, s->summary);
    }
}
