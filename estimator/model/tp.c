/* Tensor parallelism's rank view and its limits (tp.h). Sources: torchtitan
 * at commit 2025-10 (torchtitan/models/llama3/infra/parallelize.py apply_tp,
 * torchtitan/distributed/parallel_dims.py), torch 2.8
 * torch/distributed/tensor/parallel/style.py. */
#include "tp.h"

#include "str_util.h"
#include "fw_registry.h"
#include "lora.h"
#include "peft.h"

bool est_tp_on(const est_run *run) { return run->tp > 1; }

/* What the block description does not split under --tp (one line each). */
static int model_limits(const est_run *run, char *err, size_t errlen) {
    const ft_model *m = &run->model;
    const int64_t n = run->tp;
    if (m->num_heads % n != 0 || m->num_kv_heads % n != 0)
        return ft_errorf(err, errlen, "--tp %lld must divide the attention heads (%lld) and KV heads (%lld)",
                         (long long)n, (long long)m->num_heads, (long long)m->num_kv_heads);
    if (m->intermediate_size % n != 0 || m->vocab_size % n != 0)
        return ft_errorf(err, errlen, "--tp %lld must divide the MLP width (%lld) and the vocabulary (%lld); "
                                      "uneven DTensor shards are not modelled",
                         (long long)n, (long long)m->intermediate_size, (long long)m->vocab_size);
    if (m->fused_qkv || m->fused_gate_up || m->num_experts > 0 || m->sandwich_norms || m->qk_norm ||
        m->embed_scale)
        return ft_errorf(err, errlen, "--tp is modelled for torchtitan's Llama blocks (separate q/k/v and "
                                      "gate/up projections, two norms, dense MLP)");
    if (run->seq_len % n != 0)
        return ft_errorf(err, errlen, "--tp %lld must divide --seq (sequence parallelism shards the tokens)",
                         (long long)n);
    return 0;
}

/* What the run adds that is not modelled beside --tp. */
static int run_limits(const est_run *run, char *err, size_t errlen) {
    if (est_lora_on(run) || est_peft_on(run))
        return ft_errorf(err, errlen, "--tp with LoRA or another PEFT method is not modelled");
    if (run->fp8 != EST_FP8_NONE || run->liger != 0 || run->kernels != 0 || run->compiled)
        return ft_errorf(err, errlen, "--tp with --fp8, --liger, --kernels or --compile is not modelled "
                                      "(nor async TP, which needs compile)");
    if (run->quant != EST_QUANT_NONE || run->rl != EST_RL_NONE || run->trainable.n > 0)
        return ft_errorf(err, errlen, "--tp with --quant, a preference objective or --trainable is not modelled");
    if (run->attention != EST_ATTN_SDPA && run->attention != EST_ATTN_FLASH)
        return ft_errorf(err, errlen, "--tp is modelled with sdpa or flash attention (torchtitan's)");
    if (run->padding_mask || run->packed || run->seq_mean > 0 || run->loss != EST_LOSS_STANDARD)
        return ft_errorf(err, errlen, "--tp is modelled on full-length unpacked rows with the standard loss "
                                      "(torchtitan's loss_parallel)");
    return 0;
}

int est_tp_validate(const est_run *run, char *err, size_t errlen) {
    if (run->cp > 1)
        return ft_errorf(err, errlen, "--cp (context parallelism, ring attention) is not modelled");
    if (run->tp < 0 || run->cp < 0) return ft_errorf(err, errlen, "--tp and --cp must be at least 1");
    if (!est_tp_on(run) || run->tp_local) return 0; /* a view was checked as the whole run */
    if (est_fw_models(run, EST_FEAT_TP, NULL, err, errlen) < 0) return -1;
    if (run->gpus_per_node % run->tp != 0)
        return ft_errorf(err, errlen, "--tp %lld must divide the GPUs of a node (%lld); TP across nodes is "
                                      "not modelled",
                         (long long)run->tp, (long long)run->gpus_per_node);
    if (model_limits(run, err, errlen) < 0) return -1;
    return run_limits(run, err, errlen);
}

const est_run *est_tp_view(const est_run *run, est_run *local) {
    if (!est_tp_on(run) || run->tp_local) return run;
    *local = *run;
    ft_model *m = &local->model;
    m->num_heads /= run->tp;
    m->num_kv_heads /= run->tp;
    m->intermediate_size /= run->tp;
    m->vocab_size /= run->tp;
    /* torchtitan's Transformer (models/llama3/model/model.py) keeps no KV
     * cache in training, unlike Transformers' use_cache (block_kv.c) */
    local->kv_cache_off = true;
    local->tp_local = true;
    return local;
}

int64_t est_tp_seq_tokens(const est_run *run, int64_t tokens) {
    return est_tp_on(run) ? tokens / run->tp : tokens;
}
