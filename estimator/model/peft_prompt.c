#include "peft_prompt.h"

#include "json_util.h"
#include "lora.h"
#include "stack.h"

int64_t est_prefix_tokens(const est_run *run) {
    return run->peft == EST_PEFT_PREFIX_TUNING ? run->virtual_tokens : 0;
}

int64_t est_prefix_token_dim(const ft_model *m) { return m->head_dim * m->num_kv_heads; }

/* Prefix: embedding (N, num_layers x 2 x token_dim) (PrefixEncoder.__init__,
 * prefix_projection False). P-tuning: embedding (N, h), then three Linears
 * with their biases, h -> H -> H -> h (PromptEncoder.__init__, MLP). */
int64_t est_prompt_learning_params(const est_run *run) {
    const int64_t N = run->virtual_tokens, h = run->model.hidden_size, H = run->encoder_hidden;
    if (run->peft == EST_PEFT_PREFIX_TUNING)
        return N * run->layers_used * 2 * est_prefix_token_dim(&run->model);
    if (run->peft == EST_PEFT_P_TUNING) return N * h + (h * H + H) + (H * H + H) + (H * h + h);
    return 0;
}

int64_t est_adaption_block_params(const est_run *run) {
    return run->peft == EST_PEFT_ADAPTION_PROMPT ? run->adapter_len * run->model.hidden_size + 1 : 0;
}

/* Adaption prompt on the Llama family (config.py TRANSFORMERS_MODEL_CONFIG:
 * llama, mistral, gpt2 and a few others; ftest builds the Llama block). */
static int adaption_validate(const est_run *run, char *err, size_t errlen) {
    if (run->adapter_len < 1 || run->adapter_len > EST_LORA_MAX_RANK)
        return ft_errorf(err, errlen, "--adapter-len must be between 1 and %d (got %lld)", EST_LORA_MAX_RANK,
                         (long long)run->adapter_len);
    if (run->model.arch != FT_ARCH_LLAMA && run->model.arch != FT_ARCH_MISTRAL)
        return ft_errorf(err, errlen, "--peft adaption-prompt is modelled for Llama and Mistral (PEFT's "
                                      "AdaptedAttention for llama/mistral)");
    if (run->model.num_heads * run->model.head_dim != run->model.hidden_size)
        return ft_errorf(err, errlen, "--peft adaption-prompt needs heads x head_dim = hidden size (PEFT "
                                      "views the adapter output as the hidden size)");
    return 0;
}

int est_prompt_learning_validate(const est_run *run, char *err, size_t errlen) {
    if (run->peft == EST_PEFT_ADAPTION_PROMPT) return adaption_validate(run, err, errlen);
    if (run->peft != EST_PEFT_PREFIX_TUNING && run->peft != EST_PEFT_P_TUNING) return 0;
    if (run->virtual_tokens < 1 || run->virtual_tokens > EST_LORA_MAX_RANK)
        return ft_errorf(err, errlen, "--virtual-tokens must be between 1 and %d (got %lld)", EST_LORA_MAX_RANK,
                         (long long)run->virtual_tokens);
    if (run->peft == EST_PEFT_P_TUNING && (run->encoder_hidden < 1 || run->encoder_hidden > (1 << 20)))
        return ft_errorf(err, errlen, "--encoder-hidden must be between 1 and %d (got %lld): P-tuning's "
                                      "encoder_hidden_size",
                         1 << 20, (long long)run->encoder_hidden);
    /* peft_model.py _setup_prompt_encoder: prefix tuning refuses gradient
     * checkpointing ("does not work with gradient checkpointing"). */
    if (run->peft == EST_PEFT_PREFIX_TUNING && run->checkpointing != EST_CKPT_NONE)
        return ft_errorf(err, errlen, "--peft prefix-tuning does not work with gradient checkpointing (PEFT "
                                      "refuses it: its prefix is a KV cache)");
    /* the layered DynamicCache of transformers 5.x (block_prompt.c); 4.x keeps
     * PEFT's legacy tuple and a float mask, not modelled */
    if (run->peft == EST_PEFT_PREFIX_TUNING &&
        !(run->stack && run->stack->kv_cache_copies && run->stack->transformers[0] >= '5'))
        return ft_errorf(err, errlen, "--peft prefix-tuning is modelled on transformers 5.x stacks (--stack "
                                      "2026-07 or later: the layered DynamicCache)");
    if (run->peft == EST_PEFT_PREFIX_TUNING && run->attention != EST_ATTN_SDPA)
        return ft_errorf(err, errlen, "--peft prefix-tuning is modelled for --attention sdpa only");
    const int64_t maxpos = run->model.max_position, len = run->seq_len + run->virtual_tokens;
    if (maxpos > 0 && len > maxpos)
        return ft_errorf(err, errlen, "--seq %lld plus %lld virtual tokens is above %s's maximum of %lld "
                                      "positions",
                         (long long)run->seq_len, (long long)run->virtual_tokens, run->model.name,
                         (long long)maxpos);
    return 0;
}
