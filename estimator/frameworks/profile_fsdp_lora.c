/* FSDP FULL_SHARD with LoRA or QLoRA adapters, the HF Trainer + accelerate +
 * PEFT setup of the "FSDP + QLoRA" recipes (torch 2.2-2.4, peft 0.12-0.13,
 * bitsandbytes >= 0.43, TRL's SFTTrainer). docs/method.md ("LoRA and QLoRA
 * with FSDP") walks through each term. Notation: W ranks, c the compute dtype.
 *  - Wrapping: PEFT's fsdp_auto_wrap_policy (utils/other.py) wraps every
 *    decoder layer (_no_split_modules) and, through its lambda policy, every
 *    leaf module whose weight requires grad: each lora_A and lora_B is a unit
 *    of its own, so no FlatParameter mixes frozen and trainable weights. The
 *    frozen units have no gradient.
 *  - Storage: the frozen base in c (with QLoRA, bnb_4bit_quant_storage = c
 *    packs the 4-bit codes into c-typed elements so FSDP can flatten and shard
 *    them); the quantization constants (absmax, second-level constants) belong
 *    to each weight's quant_state, not to any parameter, so every rank keeps
 *    all of them. Sharded QLoRA skips prepare_model_for_kbit_training (TRL's
 *    is_sharded_qlora), so nothing is upcast to fp32.
 *  - Adapters: fp32 shards (PEFT's autocast_adapter_dtype), fp32 sharded
 *    gradients and AdamW state; MixedPrecision(param_dtype=c) gathers them in c.
 *  - Gathered while computing: one decoder layer's frozen weights (codes) and
 *    its adapters in c; the root unit (embedding, final norm, LM head) at the
 *    embedding and at the loss. */
#include <string.h>

#include "hf_modeling.h"
#include "lora.h"
#include "optimizers.h"
#include "profiles.h"
#include "quant.h"
#include "torch_step.h"

int est_step_fsdp_lora(const est_run *run, const est_constants *k, est_step *st, char *err,
                           size_t errlen) {
    est_params p;
    est_run_params(run, &p);
    const int64_t W = est_run_world(run), L = run->layers_used;
    const int64_t c = est_compute_dtype_bytes(run->precision);
    const int64_t A = est_lora_params(run), A_block = est_lora_block_params(run);
    const int64_t aw = est_lora_weight_bytes(run);

    /* A decoder layer's frozen bytes in its flat parameter: the quantized
     * codes (or c-byte weights) of the seven linears plus norms and biases;
     * the root unit: embedding, final norm and an untied head. */
    const int64_t constants_block = est_quant_block_constants_bytes(run);
    const int64_t base_total = est_frozen_base_bytes(run, &p);
    const int64_t root = (p.embedding + p.final_norm + p.lm_head) * c;
    const int64_t block_flat = (base_total - root) / L - constants_block;

    est_optimizer_bytes ob; /* the adapters' optimizer, then sharded */
    est_optimizer_bytes_of(run, aw, &ob);

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    t.base[EST_CAT_PARAMS] = est_shard(L * block_flat + root, W) + L * constants_block +
                             est_shard(A, W) * aw + est_rope_cache_bytes(run);
    t.base[EST_CAT_OPTIMIZER] = est_shard(ob.state_bytes, W);
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    if (run->grad_accum > 1) t.base[EST_CAT_GRADS] = est_shard(A, W) * aw;
    else t.block_grads = est_shard(A_block, W) * aw;
    t.block_gathered = block_flat + A_block * c;
    t.head_gathered = root;
    /* A layer's unsharded adapter gradients, in c, until the reduce-scatter. */
    t.block_grad_transient = A_block * c;

    /* cpu_ram_efficient_loading: rank 0 reads the checkpoint, the others
     * build on the meta device and receive their shards; spread over the
     * node's processes so that the node's total is rank 0's copy. */
    st->cpu_load_bytes = est_shard(p.total * c, run->gpus_per_node);

    int64_t live[EST_CAT_COUNT];
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_OPTIMIZER] = 0;
    if (est_push(st, EST_PHASE_INIT, -1, "model sharded, adapters added", live, err, errlen))
        return -1;
    if (est_push_forward_backward(run, k, &t, st, err, errlen)) return -1;

    memcpy(live, t.base, sizeof live);
    live[EST_CAT_GRADS] = est_shard(A, W) * aw;
    if (est_push_unit(st, run, k, EST_PHASE_REDUCE, -1, "adapter gradients reduce-scattered", live,
                      EST_UNIT_REDUCE, err, errlen))
        return -1;
    est_live_add(live, EST_CAT_WORKSPACE, est_shard(ob.step_bytes, W));
    return est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, "optimizer step (adapter shards)", live,
                         EST_UNIT_OPTIMIZER, err, errlen);
}
