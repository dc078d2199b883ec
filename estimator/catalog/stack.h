/* Software stacks: the framework versions a run is estimated for. What a
 * framework keeps in memory changes between releases, so every
 * version-dependent term of a profile reads its switch from the stack and
 * cites the release range it holds for (docs/method.md, "Software stacks").
 * `ftest stacks` lists them; `--stack NAME` picks one. */
#ifndef EST_STACK_H
#define EST_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct est_stack {
    const char *name;          /* "2024-04": the key used by --stack and records */
    const char *torch, *transformers, *deepspeed, *accelerate, *peft;
    const char *summary;       /* one line for `ftest stacks` */
    /* transformers < 4.45: every Qwen2/Mistral decoder layer owns a rotary
     * module whose cos/sin caches cover max_position_embeddings
     * (modeling_qwen2.py Qwen2RotaryEmbedding._set_cos_sin_cache, 4.40);
     * from 4.45 one model-level rotary module computes cos/sin per forward
     * (modeling_qwen2.py Qwen2Model.rotary_emb, 4.45-4.49). */
    bool per_layer_rope_cache;
    /* RoPE's cos/sin computed once per forward by a model-level rotary
     * module and passed to every decoder layer as position_embeddings
     * (LlamaModel.rotary_emb: transformers 4.44.2 for Llama, 4.45.0 for
     * Qwen2 and Qwen2-MoE, every family ftest knows by 4.49.0 and in 5.x),
     * so every layer's apply_rotary_pos_emb saves the same two tensors; 4.40.0
     * calls self.rotary_emb(value_states, position_ids) in each attention
     * layer, which makes (and saves) its own pair. */
    bool rope_once_per_forward;
    /* FSDP1 through accelerate: from 0.30.0 Accelerator.prepare_model casts
     * every FSDP unit's FlatParameter that is not fp32 to fp32 when mixed
     * precision is on (accelerator.py, after `model = FSDP(model, **kwargs)`:
     * `param.data = param.data.to(torch.float32)  # upcasting`, and
     * `_handle._orig_param_dtype = torch.float32`; present in 0.30.0 and
     * 1.4.0, absent in 0.29.3), so a bf16-loaded model keeps fp32 shards,
     * gradients and Adam state; 0.29 keeps the loaded dtype. FSDP2: see
     * fsdp2_upcasts_whole_model. */
    bool fsdp_upcasts_low_precision_params;
    /* FSDP2 through accelerate 1.6.0-1.12.0: fsdp2_prepare_model
     * (utils/fsdp_utils.py; 1.11.0 lines 704-707, 1.6.0 line 565) calls
     * `model = model.to(torch.float32)` after fully_shard when
     * mixed_precision != "no" and the model is not fp32: every sharded
     * parameter, frozen ones included, becomes fp32, and its gradient and
     * Adam state follow. 1.13.0 (line 740) writes `param =
     * param.to(torch.float32)`, which rebinds a local name and upcasts
     * nothing; 1.14.0 (line 714) upcasts the trainable parameters' .data
     * before fully_shard. Off on the stacks whose accelerate was read with no
     * upcast (1.15.0, docs/method.md "Dtypes") or that have no FSDP2 in
     * accelerate (< 1.6). */
    bool fsdp2_upcasts_whole_model;
    /* PEFT < 0.12 gives each new adapter its base weight's dtype when that is
     * floating (lora/layer.py LoraLayer.update_layer, v0.10.0 lines 114-123:
     * `self.to(weight.device, dtype=weight.dtype)`): a bf16-loaded base's, and
     * QLoRA's Params4bit whose bnb_4bit_quant_storage is bf16 (PEFT's FSDP
     * guide: "bfloat16 for pure bfloat16 finetuning"); 0.12 added
     * get_peft_model(autocast_adapter_dtype=True), which casts them to fp32. */
    bool peft_adapters_in_base_dtype;
    /* DeepSpeed <= 0.14.2: every DeepSpeedCPUAdam pins two staging tiles of
     * TILE = 128 Mi floats on the host (csrc/includes/cpu_adam.h, the
     * Adam_Optimizer constructor's cudaMallocHost; simd.h TILE), 1 GiB per
     * process; 0.14.3 removed them (commit 69af361, "CPUAdam fp16 and bf16
     * support", #5409). */
    bool ds_cpu_adam_pinned_tiles;
    /* torch >= 2.4 ships FSDP2, torch.distributed._composable.fsdp.fully_shard
     * (public as torch.distributed.fsdp.fully_shard from 2.6); torch 2.2 has
     * only FSDP1. --fsdp-version 2 needs it. */
    bool torch_has_fully_shard;
    /* FSDP2 on a mesh of one rank: from torch 2.9 (PR #160135, Aug 2025;
     * 2.15 _fsdp_param_group.py unshard and wait_for_unshard under
     * "world_size == 1") no all-gather and no flat input or output: each
     * parameter's unsharded tensor is filled from its all-gather input and
     * nothing is deferred to the next copy-out; torch 2.6 goes through
     * foreach_all_gather and its flat buffers at any size (seam_fsdp2.c). */
    bool fsdp2_one_rank_skips_gather;
    /* transformers' DynamicCache (use_cache in training without checkpointing):
     * up to 4.5x it keeps the layer's key and value tensors themselves
     * (cache_utils.py DynamicCache.update appends them, 4.40-4.49); the
     * layered cache of 5.x (DynamicLayer.update) keeps torch.cat([empty,
     * states]), a copy, which the attention then reads. */
    bool kv_cache_copies;
    /* transformers 5.x integrations/sdpa_attention.py use_gqa_in_sdpa: with
     * torch >= 2.5 and no attention mask SDPA gets enable_gqa=True and the
     * grouped keys and values are not repeated (4.49 repeats them always). */
    bool sdpa_gqa_unmasked;
    /* torch's SDPA tries cuDNN attention before its FlashAttention-2 kernel
     * on sm90/sm100 (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
     * check_prefer_cudnn_attention: cuDNN runtime > 9.15.0 and not
     * TORCH_CUDNN_SDPA_DEPRIORITIZED; the 2.11.0+cu130 wheel's libtorch_cuda.so
     * holds that variable and ships cuDNN 9.19). The older stacks' torch tries
     * flash first (2.2 has no cuDNN attention; the 2.5.1-era priority_order
     * lists cuDNN last). Read by ledger/attn_rate.c. */
    bool sdpa_prefers_cudnn;
    /* transformers >= 4.46 loss/loss_utils.py ForCausalLMLoss pads and shifts
     * the labels, not the logits: no shifted copy of the fp32 logits, and
     * log_softmax over all b x s rows (4.40 modeling_llama.py copies
     * shift_logits.contiguous() when b > 1). */
    bool loss_shifts_labels;
    /* DeepSpeed >= 0.19.8: deepspeed.initialize converts a ZeRO-3 model built
     * outside zero.Init by Init(module=model), which installs
     * zero3_linear_wrap (memory_efficient_linear, on by default) as
     * zero.Init itself does (DeepSpeed PR #8189, July 2026): the linear keeps
     * no gathered weight for backward on either path. 0.14.2 and 0.16.4 leave
     * torch's linear there, which saves weight.t(), a view of the gathered
     * parameter (seam_deepspeed_zero3.c). */
    bool ds_linear_wrap_without_init;
    /* DeepSpeed 0.19.8: ZeRO-1/2 allocate the reduce bucket (ipg buffer) in
     * setup_buckets, from the first gradient hook (process_gradients), not in
     * backward() before autograd runs (0.14.2 and 0.16.4 stage_1_and_2.py
     * backward: ipg_buffer = [torch.empty(reduce_bucket_size)]). */
    bool ds_buckets_at_first_grad;
    /* DeepSpeed 0.19.8: ZeRO-1/2 flatten each bit16 group on the device when
     * the device's free memory covers the group's flat buffer
     * (stage_1_and_2.py __init__ flatten_on_accelerator: empty_cache(), then
     * available_memory() >= flat_buffer_bytes): the flat buffer is made while
     * the parameters' own tensors still live, which go once the parameters
     * point into it (_update_model_bit16_weights); the next group's
     * empty_cache() releases their segments, the last group's stay cached.
     * 0.14.2 and 0.16.4 always send the parameters to the host first
     * (seam_deepspeed_init.c). */
    bool ds_flatten_on_device;
    /* DeepSpeed 0.19.8: ZeRO-1/2's overflow test of a gradient
     * (stage_1_and_2.py _has_inf_or_nan -> runtime/utils.py has_inf_or_nan)
     * reduces first, isfinite(x.amax()) and isfinite(x.amin()), and allocates
     * nothing the size of x; 0.14.2 and 0.16.5 hold x.float(), isnan, isinf
     * (|x|), their logical_or and its .float() (seam_deepspeed_zero12.c). It
     * runs on every gradient of the partition under optimizer offload
     * (copy_grads_in_partition), and at fp16's step. */
    bool ds_overflow_check_reduces;
    /* DeepSpeed 0.19.8: ZeRO-3's hook set-up gathers each parameter alone
     * (stage3.py create_reduce_and_remove_grad_hooks: param.all_gather()),
     * and partition_parameters.py _all_gather sends a list of one, or
     * allgather_sequential, to _allgather_params_sequential: one flat tensor
     * of the parameter's numel rounded up to the ranks, the parameter a view
     * of it (param.data = flat_tensor.narrow(...)). 0.16.5's _allgather_params
     * (the len == 1 branch of _all_gather) allocates the flat tensor and a
     * replicated tensor of the parameter's shape copied out of it: two
     * tensors (seam_deepspeed_init.c hook_gathers). */
    bool ds_hook_gather_view;
    /* DeepSpeed 0.19.8: ZeRO's own host work per step (gradient hooks and
     * bucket copies, ZeRO-3's module hooks, gathers and releases, the step's
     * per-tensor norms) counted as ATen ops (frameworks/work_ds_host.c, read
     * in 0.19.8). Off for 0.14.2 and 0.16.4: not read there, and the 0.14.2
     * RTX 3090 sweep (gpjt-qwen0.5b-rtx3090.jsonl), on which the host's cost
     * per op is fitted, is met without them (docs/method.md). */
    bool ds_host_ops;
    /* transformers 5.x stores a mixture of experts' routed experts as fused 3D
     * parameters (modeling_mixtral.py MixtralExperts: gate_up_proj (E, 2 I, h)
     * and down_proj (E, h, I), nn.Parameter; the router MixtralTopKRouter's
     * weight (E, h) likewise), where 4.40-4.49 have one nn.Linear per
     * expert projection (MixtralBlockSparseTop2MLP w1/w2/w3) and a Linear
     * router. PEFT's all-linear and its module names then reach no expert;
     * LoRA on them goes through target_parameters (peft >= 0.17 ParamWrapper),
     * which ftest does not model. The block description follows the layout
     * and 5.23's grouped_mm_experts_forward on these stacks (block_moe.c). */
    bool moe_experts_fused;
    /* The HF Trainer's default optimizer (TrainingArguments.optim) is
     * "adamw_torch_fused", torch.optim.AdamW(fused=True), when the stack's
     * transformers is >= 4.54 and its torch >= 2.8 (training_args.py 4.54.0
     * lines 1286-1291: default_optim = "adamw_torch", then
     * `if is_torch_greater_or_equal_than_2_8: default_optim =
     * "adamw_torch_fused"`, pytorch_utils.py is_torch_greater_or_equal("2.8");
     * the same in 4.55-4.57 and 5.17 lines 804-809; 4.53.0 lines 1281-1288
     * keep "adamw_torch" with the switch commented out). Otherwise
     * "adamw_torch": torch picks foreach for CUDA tensors
     * (optimizer.py _default_to_fused_or_foreach(use_fused=False)).
     * est_optimizer_adamw_fused reads it. */
    bool trainer_default_fused;
    /* Read for the PyTorch path only (--framework hf): DeepSpeed and FSDP runs
     * are refused on it (run.c). */
    bool hf_only;
} est_stack;

/* The stack used when none is named (not the newest: records that name no
 * stack are estimated with it; docs/usage.md "Software stacks"). */
#define EST_DEFAULT_STACK "2025-02"

/* NULL when unknown. */
const est_stack *est_stack_find(const char *name);
/* The stack whose torch, transformers and deepspeed versions a record's
 * "stack" object lists (a local version suffix such as "+cu130" aside);
 * NULL when it lists them not all, or ftest has no such stack. */
struct cJSON;
const est_stack *est_stack_of_versions(const struct cJSON *listed);
const est_stack *est_stack_default(void);

/* 0 and *out set, or -1 with a message listing the stacks. */
int est_stack_parse(const char *name, const est_stack **out, char *err, size_t errlen);

/* `ftest stacks`: every stack with its versions. */
void est_stacks_print(FILE *out);

#endif
