/* DeepSpeed's set-up on the device, tensor by tensor, in the order
 * deepspeed.initialize makes and frees them (0.14.2; the same lines in
 * 0.16.4). The allocator keeps the segments this history leaves behind, so
 * the order matters for the reserved peak as much as the sizes do.
 *
 * engine.py _configure_distributed_model: module.half() on the host, then
 * module.to(device): every parameter and buffer copied in Module._apply's
 * order (a module's children first, then its own parameters, then its
 * buffers: in a transformers 4.40 decoder layer q, k, v, o, the rotary
 * module's caches, gate, up, down, the two norms).
 *
 * Stage 3 (stage3.py DeepSpeedZeroOptimizer_Stage3.__init__):
 *  - DeepSpeedZeRoOffload converts the finished module (Init(module=...),
 *    partition_parameters.py _partition_param): per parameter its partition
 *    ceil(numel/W) is allocated while the full tensor exists, then the full
 *    tensor is freed (free_param);
 *  - _create_fp16_partitions_with_defragmentation -> defragment: the
 *    partitions go to the host one by one, gc + empty_cache, one flat buffer
 *    of all partitions comes back;
 *  - _setup_for_real_optimizer: per sub-group fp16 flat .clone().float()
 *    (the clone dies once the fp32 master exists: _create_fp32_partitions);
 *    initialize_optimizer_states attaches a zero fp32 gradient buffer of the
 *    largest sub-group and drops it; the contiguous-gradient bucket
 *    (__ipg_bucket_flat_buffer, reduce_bucket_size elements) and the gradient
 *    partition (grad_partitions_flat_buffer, zeros);
 *  - create_reduce_and_remove_grad_hooks: each parameter is gathered to hook
 *    its AccumulateGrad (param.all_gather() -> _allgather_params: a flat
 *    buffer of the padded partitions and the parameter's own tensor; the flat
 *    buffer dies at return, the tensor at param.partition()).
 * Under zero.Init the module was partitioned as it was built and is not moved.
 * LoRA: the frozen base is partitioned and gathered like any parameter, but
 * only the adapters (requires_grad) enter _get_trainable_parameter_groups
 * (0.14.2-0.19.8): the flat partition, master, gradient partition, hooks and
 * Adam state are theirs; the base's partitions stay where they were made.
 *
 * Stages 1-2 (stage_1_and_2.py DeepSpeedZeroOptimizer.__init__), optimizer
 * group by group (flatten_groups): each parameter's data goes to the host and
 * is replaced by a one-element device placeholder, empty_cache(), the group's
 * flat bit16 buffer comes back in one allocation, then the group's fp32
 * partition is bit16_partition.clone().float() (the clone dies at once; on the
 * host with offload) before the next group starts; initialize_optimizer_
 * states attaches a zero fp32 gradient partition per group and (without
 * offload) drops them; with offload temp_grad_buffer_for_gpu_offload (the
 * largest parameter) stays on the device. Adam's state appears at the first
 * step in both.
 *
 * Stage 0 (fp16/fused_optimizer.py FP16_Optimizer) keeps the module's own
 * tensors and builds one fp32 flat master. */
#include <stdlib.h>
#include <string.h>

#include "hf_modeling.h"
#include "lora.h"
#include "profiles.h"
#include "seam_deepspeed.h"

/* The per-layer rotary caches (transformers 4.40: cos and sin, each
 * max_position x head_dim) registered after the attention's Linears. */
static bool rope_after(const est_sim *s, const est_param_ref *r) {
    if (r->inst == EST_INST_EMBED || r->inst > s->L) return false;
    const est_mparam *p = est_sim_param(s, r->inst, r->p);
    return p->kind == EST_PK_LINEAR_WEIGHT && p->lora_target == EST_LORA_O;
}

/* Allocates one block's two caches in elem_bytes; their ids go to out[0..1]
 * when out is not NULL. */
static void rope_buffers(est_sim *s, int64_t elem_bytes, int32_t *out) {
    const int64_t rope = est_rope_cache_bytes(s->run);
    if (rope <= 0 || s->L <= 0) return;
    const int64_t per = rope / s->L / 2 / est_dtypes_of(s->run).act * elem_bytes;
    const int32_t cos = est_sim_alloc(s, EST_CAT_PARAMS, per, "rotary cos cache", 0);
    const int32_t sin = est_sim_alloc(s, EST_CAT_PARAMS, per, "rotary sin cache", 0);
    if (out) {
        out[0] = cos;
        out[1] = sin;
    }
}

/* module.to(device) in _apply's order; t[i] gets parameter i's tensor. */
static void move_module(est_sim *s, ds_state *d, int32_t *t) {
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        t[i] = est_sim_alloc(s, EST_CAT_PARAMS, est_sim_param_elems(s, r->inst, r->p) * d->c,
                             est_sim_param(s, r->inst, r->p)->name, 0);
        if (rope_after(s, r)) rope_buffers(s, d->c, NULL);
    }
}

/* zero.Init: each parameter was partitioned as its module was built; the
 * buffers were made in fp32 on the device and the engine's module.half()
 * casts them (a new tensor each, the fp32 one freed). */
static void built_partitioned(est_sim *s, ds_state *d, int32_t *t) {
    int32_t *buf = malloc(((size_t)s->L * 2 + 1) * sizeof *buf);
    int nb = 0;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const int64_t e = est_sim_param_elems(s, r->inst, r->p);
        t[i] = d->offload_params ? -1 : est_sim_alloc(s, EST_CAT_PARAMS, est_shard(e, d->W) * d->c,
                                                      est_sim_param(s, r->inst, r->p)->name, 0);
        if (rope_after(s, r) && buf && nb + 2 <= s->L * 2) {
            buf[nb] = buf[nb + 1] = -1;
            rope_buffers(s, 4, &buf[nb]);
            nb += 2;
        }
    }
    for (int i = 0; i < nb; i++) { /* module.half() / bfloat16(); fp32 keeps them */
        if (buf[i] < 0 || d->c == 4) continue;
        est_sim_alloc(s, EST_CAT_PARAMS, est_step_tensor_bytes(s->st, buf[i]) / 4 * d->c, "rotary cache", 0);
        est_sim_release(s, buf[i]);
    }
    free(buf);
}

/* Stage 3 without zero.Init: each parameter's partition beside its full
 * tensor, then the full tensor freed. */
static void partition_module(est_sim *s, ds_state *d, int32_t *t) {
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const int64_t e = ds_param_numel(s, d, r->inst, r->p);
        const int32_t part =
            d->offload_params ? -1 : est_sim_alloc(s, EST_CAT_PARAMS, est_shard(e, d->W) * d->c, "partition", 0);
        est_sim_release(s, t[i]);
        t[i] = part;
    }
}

/* LoRA: the frozen base as loaded (bitsandbytes' storage for a quantized
 * Linear, the compute dtype after module.bfloat16() for the rest, with the
 * rotary caches), whole on every rank: DeepSpeedZeroOptimizer flattens only
 * the parameters that require grad (stage_1_and_2.py __init__: the
 * trainable_parameters of each param group; the HF Trainer's optimizer holds
 * no others, trainer.py create_optimizer). */
static void frozen_base(est_sim *s, ds_state *d) {
    const int slots = est_sim_slots(s);
    est_param_ref *all = malloc((size_t)(slots > 0 ? slots : 1) * sizeof *all);
    if (!all) {
        s->st->oom = true;
        return;
    }
    const int n = est_sim_params(s, false, all);
    for (int i = 0; i < n; i++) {
        const est_mparam *p = est_sim_param(s, all[i].inst, all[i].p);
        if (p->trainable) continue;
        const int64_t bytes = est_sim_param_storage(s, all[i].inst, all[i].p);
        est_sim_alloc(s, EST_CAT_PARAMS, bytes, p->name, 0);
        if (rope_after(s, &all[i])) rope_buffers(s, d->c, NULL);
    }
    free(all);
}

/* QLoRA at stage 3: transformers loads a quantized model whole on each rank,
 * never under zero.Init (5.17 modeling_utils.py get_init_context: `elif
 * is_quantized: torch.device("meta")`; _load_pretrained_model: `if
 * is_deepspeed_zero3_enabled() and not is_quantized`); each frozen Linear
 * weight arrives in the compute dtype and bitsandbytes quantizes it on the
 * device (Params4bit._quantize), leaving the packed codes (t[i]) and its
 * QuantState; DeepSpeedZeRoOffload then partitions the finished module
 * (partition_module) and the constants stay. */
static void qlora_loaded(est_sim *s, ds_state *d, int32_t *t) {
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const int64_t e = est_sim_param_elems(s, r->inst, r->p), packed = ds_param_numel(s, d, r->inst, r->p);
        const char *name = est_sim_param(s, r->inst, r->p)->name;
        const int32_t loaded = packed == e ? -1 : est_sim_alloc(s, EST_CAT_PARAMS, e * d->c, "weight to quantize", 0);
        t[i] = est_sim_alloc(s, EST_CAT_PARAMS, packed * d->c, name, 0);
        est_sim_release(s, loaded);
        if (rope_after(s, r)) rope_buffers(s, d->c, NULL);
    }
    const int64_t constants = ds_quant_constants_bytes(s, d);
    if (constants > 0) est_sim_alloc(s, EST_CAT_PARAMS, constants, "quantization constants", 0);
}

/* The weights as the optimizer finds them, one tensor per parameter in t. */
static void model_on_device(est_sim *s, ds_state *d, int32_t *t) {
    const bool stage3 = s->run->zero_stage == 3;
    est_step_span(s->st, EST_PHASE_INIT, -1,
                  stage3 && s->run->zero_init && s->run->quant == EST_QUANT_NONE ? "model partitioned (zero.Init)"
                                                                                 : "model moved to the device whole");
    if (d->lora && !stage3) frozen_base(s, d);
    if (stage3 && s->run->quant != EST_QUANT_NONE) {
        qlora_loaded(s, d, t);
        partition_module(s, d, t);
        return;
    }
    if (stage3 && s->run->zero_init) {
        built_partitioned(s, d, t);
        return;
    }
    move_module(s, d, t);
    if (stage3) partition_module(s, d, t);
}

/* Stage 3's flat compute-dtype partition: every parameter's (n); under LoRA
 * the trainable ones' alone, the optimizer's sub-groups (stage3.py
 * _create_fp16_partitions_with_defragmentation(self.trainable_param_groups),
 * 0.19.8: each ds_tensor of ceil(numel / W) elements). */
static int64_t flat_partition(const ds_state *d) {
    if (!d->lora) return d->n;
    int64_t e = 0;
    for (int g = 0; g < d->n_sub_groups; g++) e += d->sub_groups[g];
    return e;
}

/* 0.19.8's flat buffer of bit16 group g (the Trainer's second group: its
 * norms and biases), in elements: the group's padded to 2 W
 * (nccl_start_alignment_factor x W, flatten_dense_tensors_aligned). */
static int64_t group_flat_elems(est_sim *s, const ds_state *d, int g) {
    const bool two = ds12_two_groups(s, d);
    const int64_t align = 2 * d->W;
    int64_t elems = 0;
    for (int i = 0; i < d->n_refs; i++)
        if (!two || ds12_no_decay(est_sim_param(s, d->refs[i].inst, d->refs[i].p)) == (g == 1))
            elems += est_sim_param_elems(s, d->refs[i].inst, d->refs[i].p);
    return (elems + align - 1) / align * align;
}

/* Stages 1-2 make the masters group by group inside the flattening loop
 * (group_master), on every stack: DeepSpeed 0.14.2 stage_1_and_2.py lines
 * 303-418, 0.16.4 lines 304-425 and 0.19.8 lines 560-561 all clone a group's
 * partition in the loop body, right after its flat buffer. */
static bool masters_in_loop(const est_sim *s) { return s->run->zero_stage == 1 || s->run->zero_stage == 2; }

/* A bit16 group's fp32 master partition, made inside __init__'s loop over
 * the groups, right after the group's flat buffer: the clone in the compute
 * dtype, its fp32 copy, the clone freed at once. 0.14.2 (line 394) and
 * 0.16.4 (line 401) write partition.to(self.device).clone().float().detach();
 * with offload self.device is 'cpu', so the partition is copied to the host
 * first and nothing of the master touches the device. 0.19.8 (lines 560-561)
 * writes .detach().clone().to(device=self.device, dtype=fp32): the clone is
 * made on the GPU and, with offload, the blocking copy converts on the host
 * (torch 2.11 aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: "For
 * blocking transfers conversions are performed on CPU"), so the clone alone
 * touches the device. Of the catalog's stacks only 0.19.8 has this order, the
 * one that also flattens on the device (stack.h ds_flatten_on_device), so
 * that flag tells the two apart. The next group's empty_cache() returns the
 * clone's segment; a clone made after the loop (no version does) would leave
 * it cached into the step, where the first step's activations split it. */
static void group_master(est_sim *s, ds_state *d, int64_t elems) {
    if (d->offload) {
        if (s->run->stack->ds_flatten_on_device)
            ds_transient(s, EST_CAT_MASTER, elems * d->c, "clone for the fp32 master (to the host)", 0);
        return;
    }
    const int32_t low = est_sim_alloc(s, EST_CAT_MASTER, elems * d->c, "clone for the fp32 master", 0);
    if (d->c == 4) return; /* .float() / .to(float32) of the fp32 clone is the clone */
    est_sim_alloc(s, EST_CAT_MASTER, elems * 4, "fp32 master", 0);
    est_sim_release(s, low);
}

/* Stages 1-2 (stage_1_and_2.py __init__, the loop over
 * self.optimizer.param_groups: 0.14.2 lines 303-418, 0.16.4 lines 304-425),
 * bit16 group by bit16 group (the HF Trainer's decay group, then its norms
 * and biases; one group otherwise). 0.14.2 and 0.16.4: the group's
 * parameters to the host, a one-element device placeholder each
 * (torch.empty(1).to(param.device), line 326 / 328), empty_cache() (line 328
 * / 330), the group's flat buffer (its elements padded to 2 W:
 * flatten_dense_tensors_aligned) built on the host and moved in one
 * allocation (line 362 / 364), the placeholders freed when the parameters
 * become views of it (_update_model_bit16_weights, line 378 / 373), then the
 * group's master (group_master); the next group's parameters stay on the
 * device meanwhile. DeepSpeed 0.19.8 (stack ds_flatten_on_device) calls
 * empty_cache() first and makes the buffer on the device beside the
 * parameters when available_memory() covers it, and their own tensors go
 * when they become views of it. Available is taken as the card's memory less
 * what is allocated (cuda_accelerator.py available_memory without pynvml;
 * NVML's free also takes off the cached segments and the context, which
 * leaves the answer the same on the cards this is for). A group that does not
 * fit takes 0.14.2's way. */
static void flatten_groups(est_sim *s, ds_state *d, int32_t *t) {
    const bool two = ds12_two_groups(s, d);
    for (int g = 0; g < (two ? 2 : 1); g++) {
        const int64_t bytes = group_flat_elems(s, d, g) * d->c;
        const bool device_first = s->run->stack->ds_flatten_on_device;
        if (device_first) est_step_empty_cache(s->st);
        const bool on_device = device_first && s->run->gpu.memory_bytes - s->st->allocated_now >= bytes;
        for (int i = 0; !on_device && i < d->n_refs; i++) {
            if (two && ds12_no_decay(est_sim_param(s, d->refs[i].inst, d->refs[i].p)) != (g == 1)) continue;
            const int32_t placeholder = est_sim_alloc(s, EST_CAT_PARAMS, 4, "placeholder", 0);
            est_sim_release(s, t[i]);
            t[i] = placeholder;
        }
        if (!on_device) est_step_empty_cache(s->st);
        est_sim_alloc(s, EST_CAT_PARAMS, bytes, g == 0 ? "bit16 flat weights" : "bit16 flat weights (no decay)", 0);
        for (int i = 0; i < d->n_refs; i++) {
            if (two && ds12_no_decay(est_sim_param(s, d->refs[i].inst, d->refs[i].p)) != (g == 1)) continue;
            est_sim_release(s, t[i]);
            t[i] = -1;
        }
        group_master(s, d, bytes / d->c / d->W);
    }
}

/* The per-parameter tensors leave for the host and the flat buffer comes
 * back after empty_cache: stages 1-2 group by group (flatten_groups), stage 3
 * in one buffer; stage 0 flattens clones on the device. */
static void flatten(est_sim *s, ds_state *d, int32_t *t) {
    const int stage = s->run->zero_stage;
    if (stage == 1 || stage == 2) {
        flatten_groups(s, d, t);
        return;
    }
    if (stage == 0) { /* fused_optimizer.py: a flat of clones, then the params point into it */
        int32_t *clone = malloc((size_t)(d->n_refs > 0 ? d->n_refs : 1) * sizeof *clone);
        for (int i = 0; clone && i < d->n_refs; i++)
            clone[i] = est_sim_alloc(s, EST_CAT_PARAMS, est_step_tensor_bytes(s->st, t[i]), "clone", 0);
        est_sim_alloc(s, EST_CAT_PARAMS, d->P * d->c, "fp16 flat weights", 0);
        for (int i = 0; i < d->n_refs; i++) {
            if (clone) est_sim_release(s, clone[i]);
            est_sim_release(s, t[i]);
        }
        free(clone);
        return;
    }
    for (int i = 0; i < d->n_refs; i++) { /* stage 3 */
        if (d->lora && !est_sim_param(s, d->refs[i].inst, d->refs[i].p)->trainable)
            continue; /* a frozen partition stays where zero.Init put it */
        est_sim_release(s, t[i]);
        t[i] = -1;
    }
    est_step_empty_cache(s->st);
    if (!d->offload_params) est_sim_alloc(s, EST_CAT_PARAMS, flat_partition(d) * d->c, "fp16 partition", 0);
}

/* The fp32 master from a clone of the compute-dtype weights, the zero
 * gradient initialize_optimizer_states attaches and drops (on the device
 * only without offload). */
static void master(est_sim *s, ds_state *d) {
    if (d->offload) return;
    if (masters_in_loop(s)) { /* initialize_optimizer_states: a zero fp32 gradient per group, then none */
        int32_t zero[2] = {-1, -1};
        for (int g = 0; g < (ds12_two_groups(s, d) ? 2 : 1); g++)
            zero[g] = est_sim_alloc(s, EST_CAT_GRADS, group_flat_elems(s, d, g) / d->W * 4, "zero fp32 gradient (init)", 0);
        est_sim_release(s, zero[0]);
        est_sim_release(s, zero[1]);
        return;
    }
    int64_t largest = 0;
    for (int g = 0; g < d->n_sub_groups; g++) {
        const int64_t e = d->sub_groups[g];
        /* offload_param alone: fp16_partitioned_groups_flat[i].to(device) is a
         * device copy of the host partition, dropped once cloned
         * (stage3.py _create_fp32_partitions, 0.16.5) */
        const int32_t on_device =
            d->offload_params ? est_sim_alloc(s, EST_CAT_MASTER, e * d->c, "partition copied to the device", 0) : -1;
        const int32_t low = est_sim_alloc(s, EST_CAT_MASTER, e * d->c, "clone for the fp32 master", 0);
        est_sim_release(s, on_device);
        if (d->c < 4) {
            est_sim_alloc(s, EST_CAT_MASTER, e * 4, "fp32 master", 0);
            est_sim_release(s, low);
        }
        if (e > largest) largest = e;
    }
    const int32_t zero = est_sim_alloc(s, EST_CAT_GRADS, largest * 4, "zero fp32 gradient (init)", 0);
    /* FP16_Optimizer (stage 0) steps once on the zero gradient: Adam's state
     * at init (fused_optimizer.py initialize_optimizer_states) */
    if (s->run->zero_stage == 0) ds_optimizer_step(s, d, d->P, true);
    est_sim_release(s, zero);
}

/* Stage 3: every parameter gathered once to hook its AccumulateGrad, one at a
 * time (stage3.py create_reduce_and_remove_grad_hooks: param.all_gather(),
 * then param.partition()): a flat tensor of the rounded-up numel, and, before
 * DeepSpeed 0.19.8, a replicated tensor copied out of it (stack.h
 * ds_hook_gather_view). */
static void hook_gathers(est_sim *s, ds_state *d) {
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        if (!est_sim_param(s, r->inst, r->p)->trainable) continue;
        const int64_t e = est_sim_param_elems(s, r->inst, r->p);
        const int32_t flat = est_sim_alloc(s, EST_CAT_COMM, est_shard(e, d->W) * d->W * d->c, "hook all-gather", 0);
        const int32_t full = s->run->stack->ds_hook_gather_view
                                 ? -1 /* param.data is a view of the flat tensor */
                                 : est_sim_alloc(s, EST_CAT_PARAMS, e * d->c, "gathered for its hook", 0);
        est_sim_release(s, flat);
        est_sim_release(s, full);
    }
}

int ds_init_device(est_sim *s, ds_state *d) {
    int32_t *t = malloc((size_t)(d->n_refs > 0 ? d->n_refs : 1) * sizeof *t);
    if (!t) return -1;
    const int stage = s->run->zero_stage;
    model_on_device(s, d, t);
    est_step_span(s->st, EST_PHASE_INIT, -1, "optimizer set-up (flat weights, fp32 master)");
    flatten(s, d, t);
    free(t);
    master(s, d);
    if (stage == 3) {
        if (!s->run->ds.loose_grads) /* stage3.py: made only with contiguous_gradients */
            est_sim_alloc(s, EST_CAT_COMM, d->bucket_elems * d->c, "reduce bucket", 0);
        if (!d->offload) d->grad_partition = est_sim_alloc(s, EST_CAT_GRADS, d->train_n * d->c, "gradient partition", 0);
        est_step_span(s->st, EST_PHASE_INIT, -1, "gradient hooks (each parameter gathered once)");
        hook_gathers(s, d);
    }
    if (stage >= 1 && stage < 3 && d->offload)
        est_sim_alloc(s, EST_CAT_WORKSPACE, d->largest * d->c, "temp_grad_buffer_for_gpu_offload", 0);
    est_step_span(s->st, EST_PHASE_INIT, -1, "engine initialized");
    if (stage == 3) ds_zero3_gather_persistent(s, d);
    return 0;
}

/* The parameters in registration order, and stage 3's optimizer sub-groups
 * (stage3.py _create_fp16_sub_groups: partitions are added in order until a
 * group reaches sub_group_size). */
int ds_layout(est_sim *s, ds_state *d) {
    const int slots = est_sim_slots(s);
    d->refs = malloc((size_t)slots * sizeof *d->refs);
    d->sub_groups = malloc((size_t)(slots > 0 ? slots : 1) * sizeof *d->sub_groups);
    if (!d->refs || !d->sub_groups) return -1;
    d->n_refs = est_sim_params(s, false, d->refs);
    if (d->lora && s->run->zero_stage < 3) { /* the adapters alone: P, n and the largest tensor are theirs */
        int kept = 0;
        d->P = d->largest = 0;
        for (int i = 0; i < d->n_refs; i++) {
            const est_mparam *p = est_sim_param(s, d->refs[i].inst, d->refs[i].p);
            if (!p->trainable) continue;
            d->refs[kept++] = d->refs[i];
            d->P += p->rows * p->cols * p->copies;
            if (p->rows * p->cols > d->largest) d->largest = p->rows * p->cols; /* one expert's */
        }
        d->n_refs = kept;
        d->n = est_shard(d->P, d->W);
        d->train_P = d->P; /* what trains is what the optimizer holds */
        d->train_n = d->n;
    }
    if (d->lora && s->run->zero_stage == 3) { /* every parameter is partitioned, base and adapters */
        d->P = d->largest = 0;
        for (int i = 0; i < d->n_refs; i++) {
            const est_mparam *p = est_sim_param(s, d->refs[i].inst, d->refs[i].p);
            d->P += ds_param_numel(s, d, d->refs[i].inst, d->refs[i].p);
            if (p->trainable && p->rows * p->cols > d->largest) d->largest = p->rows * p->cols;
        }
        d->n = est_shard(d->P, d->W);
    }
    d->n_sub_groups = 0;
    if (s->run->zero_stage < 3) { /* one flat group: the rank's partition (stage 0: all) */
        d->sub_groups[d->n_sub_groups++] = s->run->zero_stage == 0 ? d->P : d->n;
        return 0;
    }
    /* the trainable parameters only, in order (frozen ones keep their own
     * partitions, outside the optimizer's groups) */
    int64_t acc = 0, trained = 0;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        if (!est_sim_param(s, r->inst, r->p)->trainable) continue;
        const int64_t e = est_sim_param_elems(s, r->inst, r->p);
        trained += e;
        acc += est_shard(e, d->W);
        if (acc >= d->sub_group_elems) {
            d->sub_groups[d->n_sub_groups++] = acc;
            acc = 0;
        }
    }
    if (acc > 0) d->sub_groups[d->n_sub_groups++] = acc;
    if (s->run->trainable.n > 0 || d->lora) {
        d->train_P = trained;
        d->train_n = est_shard(trained, d->W);
    }
    return 0;
}

void ds_layout_free(ds_state *d) {
    free(d->refs);
    free(d->sub_groups);
    d->refs = NULL;
    d->sub_groups = NULL;
}
