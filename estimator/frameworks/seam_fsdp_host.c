/* FSDP's host RAM (seam_fsdp.h fsdp_host_bytes): what one rank's process
 * holds on the host while loading the model and while training. Sources:
 *   torch 2.11 torch/distributed/fsdp/_flat_param.py
 *     FlatParamHandle.init_flat_param_attributes (lines 1258-1266);
 *   torch 2.11 ATen/core/CachingHostAllocator.h CachingHostAllocatorImpl::
 *     allocate (lines 300-302: `roundSize = c10::llvm::PowerOf2Ceil(size)`),
 *     the allocator behind Tensor.pin_memory();
 *   torch 2.11 torch/distributed/fsdp/_fully_shard/_fsdp_param.py and
 *     _fsdp_collectives.py (FSDP2's CPUOffloadPolicy, below);
 *   transformers 4.40-4.49 modeling_utils.py _load_state_dict_into_meta_model
 *     (a quantized parameter is quantized on the GPU, then its data moved to
 *     the CPU on local rank 0 and to the meta device on the others, its
 *     quant_state kept where it was made) and _load_pretrained_model (the
 *     meta-device shortcut of cpu_ram_efficient_loading is taken only
 *     `and not is_quantized`); docs/method.md ("LoRA and QLoRA with FSDP"). */
#include "lora.h"
#include "profiles.h"
#include "seam_fsdp.h"

/* What torch's pinned-memory allocator takes for a request of n bytes: the
 * next power of two (CachingHostAllocator.h allocate). */
int64_t est_pinned_bytes(int64_t n) {
    if (n <= 0) return 0;
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* The host copy one process keeps while loading. Without quantization the
 * model in the loaded dtype (c under LoRA). A bitsandbytes model keeps its
 * parameters as loaded: the packed codes (in compute-dtype elements, as FSDP
 * will flatten them), the rest in c, PEFT's adapters (created afterwards on
 * their base layer's device) in their own dtype; the quantization constants
 * stay on the GPU that made them. */
static int64_t loaded_copy_bytes(est_sim *s, const fsdp_state *f) {
    const est_run *run = s->run;
    est_params p;
    est_run_params(run, &p);
    if (run->quant == EST_QUANT_NONE)
        return p.total * (est_lora_on(run) ? f->c
                          : run->load_dtype == EST_LOAD_BF16 || run->precision == EST_PREC_BF16 ? 2
                                                                                                : 4);
    int64_t bytes = 0;
    for (int u = 0; u < f->n_units; u++) bytes += f->units[u].numel * fsdp_unit_elem_bytes(s, f, u);
    return bytes;
}

/* FSDP1 under CPUOffload(offload_params=True): at the lazy init every
 * FlatParameter's shard is copied into pinned memory (`_local_shard =
 * _local_shard.pin_memory()`) and a pinned gradient buffer of the same size
 * and dtype is made for it (`_cpu_grad = zeros_like(...).pin_memory()`),
 * trainable or not; each rounded up to a power of two by the pinned
 * allocator. The unpinned shard FSDP's constructor left stays the parameter's
 * data until the unit is first copied to the device (pre_unshard:
 * flat_param_to): at the lazy init all three are there. AdamW's two moments
 * (torch's optim: zeros_like(param), unpinned) come at the first step, when
 * the unpinned shards are gone. The larger of the two moments is the rank's. */
static int64_t fsdp1_offload_host(est_sim *s, const fsdp_state *f) {
    int64_t pinned = 0, unpinned = 0, states = 0;
    for (int u = 0; u < f->n_units; u++) {
        const int64_t b = f->units[u].shard * fsdp_unit_elem_bytes(s, f, u);
        pinned += 2 * est_pinned_bytes(b);
        unpinned += b;
    }
    for (int i = 0; i < f->n_opt && s->run->optimizer == EST_OPT_ADAMW; i++) states += 2 * f->opt[i].numel * f->w;
    return pinned + (unpinned > states ? unpinned : states);
}

/* FSDP2's CPUOffloadPolicy (pin_memory=True, its default): every parameter's
 * padded shard is copied to the host and pinned (torch 2.11
 * _fully_shard/_fsdp_param.py _init_sharded_param, lines 395-398), frozen
 * ones included; each reduced gradient comes back with
 * .to("cpu", non_blocking=True) (_fsdp_collectives.py foreach_reduce, lines
 * 618-629), which allocates pinned memory; the pinned allocator keeps a freed
 * block cached, so zero_grad returns none of it. Each rounded up to a power of
 * two; AdamW's two moments unpinned. */
static int64_t fsdp2_offload_host(est_sim *s, const fsdp_state *f) {
    int64_t pinned = 0, states = 0;
    const bool adamw = s->run->optimizer == EST_OPT_ADAMW;
    for (int i = 0; i < f->n_params; i++) {
        const fsdp_param *q = &f->params[i];
        pinned += est_pinned_bytes(q->shard * fsdp_param_elem_bytes(s, f, q));
        if (!est_sim_param(s, q->inst, q->p)->trainable) continue;
        pinned += est_pinned_bytes(q->shard * f->w);
        states += adamw ? 2 * q->shard * f->w : 0;
    }
    return pinned + states;
}

/* Host RAM while loading: every rank loads the whole model on the host (no
 * cpu_ram_efficient_loading), or with it rank 0 reads the checkpoint and the
 * others build on the meta device (a quantized model: the others quantize
 * too, and put the codes on the meta device), one copy per node, spread here
 * over the node's processes (est_fsdp_loading says which, by default rank 0
 * under LoRA). While training under offload, the shards as above. */
void fsdp_host_bytes(est_sim *s, const fsdp_state *f) {
    const est_run *run = s->run;
    const int64_t copy = loaded_copy_bytes(s, f);
    const bool rank0 = run->fsdp_loading == EST_FSDP_LOAD_RANK0 ||
                       (run->fsdp_loading == EST_FSDP_LOAD_AUTO && est_lora_on(run));
    s->st->cpu_load_bytes = rank0 ? est_shard(copy, run->gpus_per_node) : copy;
    if (!f->offload) return;
    s->st->cpu_bytes = f->v2 ? fsdp2_offload_host(s, f) : fsdp1_offload_host(s, f);
}
