#include "cli_peft.h"

#include "fw_registry.h"
#include "json_util.h"
#include "peft.h"
#include "peft_delta.h"
#include "seq_lengths.h"

/* --seq-lengths FILE or --seq-mean L: the longest batch sets seq_len (the
 * peak), the mean padded length seq_mean (the time). A file's lengths are
 * truncated at --seq when given. Random batches over several ranks: every
 * rank waits at the step's collectives for the longest of the W batches, so
 * the time is that of the expected longest of W x b samples, while a rank
 * counts the tokens of its own b (with gradient accumulation under DDP, which
 * meets once per step, an upper bound). */
static int apply_lengths(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    if (cli->seq_lengths[0] && cli->seq_mean_set)
        return ft_errorf(err, errlen, "give --seq-lengths or --seq-mean, not both");
    if (cli->batching_set && !cli->seq_lengths[0])
        return ft_errorf(err, errlen, "--batching says how --seq-lengths' samples are batched; it needs "
                                      "--seq-lengths");
    if (cli->seq_mean_set) {
        run->seq_mean = cli->seq_mean;
        return 0;
    }
    if (!cli->seq_lengths[0]) return 0;
    est_seq_hist h;
    if (est_seq_lengths_load(cli->seq_lengths, &h, err, errlen) < 0) return -1;
    const int64_t truncate = cli->seq_set ? cli->seq : 0;
    run->seq_len = est_seq_longest(&h, truncate);
    run->seq_mean = est_seq_padded_mean(&h, run->micro_batch, cli->batching, truncate);
    const int64_t W = est_run_dp(run); /* data-parallel ranks: a tensor-parallel group shares a batch */
    if (W > 1 && cli->batching == EST_BATCHING_RANDOM) {
        run->seq_tokens_mean = run->seq_mean;
        run->seq_mean = est_seq_padded_mean(&h, run->micro_batch * W, cli->batching, truncate);
    }
    est_seq_hist_free(&h);
    if (run->seq_mean >= (double)run->seq_len) run->seq_mean = 0; /* every batch is as long */
    if (run->seq_mean == 0 && run->seq_tokens_mean > 0) run->seq_tokens_mean = 0; /* nothing to scale */
    return 0;
}

/* --peft-rank, --peft-targets, --miss-init, --miss-mini-r (peft_vec.h):
 * each needs its method; est_peft_vec_validate checks the values. */
static int apply_vec(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    const bool linear = run->peft == EST_PEFT_ADALORA || run->peft == EST_PEFT_VERA || run->peft == EST_PEFT_MISS ||
                        run->peft == EST_PEFT_PVERA || run->peft == EST_PEFT_TINYLORA;
    if ((cli->peft_rank_set || cli->peft_targets_set) && !linear && !est_pdelta_on(run))
        return ft_errorf(err, errlen, "--peft-rank and --peft-targets need --peft adalora, vera, pvera, "
                                      "tinylora, miss, loha, lokr, oft, fourierft or waveft");
    if ((cli->tinylora_u_set || cli->tinylora_tying_set) && run->peft != EST_PEFT_TINYLORA)
        return ft_errorf(err, errlen, "--tinylora-u and --tinylora-weight-tying need --peft tinylora");
    if (cli->tinylora_u_set) run->vec.u = cli->tinylora_u;
    if (cli->tinylora_tying_set) run->vec.tying = cli->tinylora_tying;
    if ((cli->miss_init_set || cli->miss_mini_r_set) && run->peft != EST_PEFT_MISS)
        return ft_errorf(err, errlen, "--miss-init and --miss-mini-r need --peft miss");
    if (linear && !cli->peft_rank_set && run->vec.rank == 0)
        return ft_errorf(err, errlen, "--peft %s needs --peft-rank N", est_peft_name(run->peft));
    if (cli->miss_init_set && cli->miss_init == EST_MISS_MINI && !cli->miss_mini_r_set)
        return ft_errorf(err, errlen, "--miss-init mini needs --miss-mini-r N");
    if (cli->miss_mini_r_set && !(cli->miss_init_set && cli->miss_init == EST_MISS_MINI))
        return ft_errorf(err, errlen, "--miss-mini-r needs --miss-init mini");
    if (cli->trainable_tokens_set != (run->peft == EST_PEFT_TRAINABLE_TOKENS))
        return ft_errorf(err, errlen, cli->trainable_tokens_set ? "--trainable-tokens needs --peft trainable-tokens"
                                                                : "--peft trainable-tokens needs --trainable-tokens N");
    if (cli->trainable_tokens_set) run->vec.tokens = cli->trainable_tokens;
    if (cli->peft_rank_set && linear) run->vec.rank = cli->peft_rank;
    if (cli->peft_targets_set && linear) run->vec.targets = cli->peft_targets;
    if (cli->miss_init_set) run->vec.miss = cli->miss_init;
    if (cli->miss_mini_r_set) run->vec.mini_r = cli->miss_mini_r;
    return 0;
}

int est_cli_apply_peft(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    if (cli->peft_set) run->peft = cli->peft;
    if (cli->lora_variant_set) run->lora.variant = cli->lora_variant;
    if (cli->lora_fa_a_grad && run->lora.variant != EST_LORA_FA)
        return ft_errorf(err, errlen, "--lora-fa-a-grad needs --lora-variant lora-fa");
    if (cli->lora_fa_a_grad) run->lora.fa_a_grad = true;
    if ((cli->ia3_targets_set || cli->ia3_feedforward_set) && run->peft != EST_PEFT_IA3)
        return ft_errorf(err, errlen, "--ia3-targets and --ia3-feedforward need --peft ia3");
    const bool virtual = run->peft == EST_PEFT_PROMPT_TUNING || run->peft == EST_PEFT_PREFIX_TUNING ||
                         run->peft == EST_PEFT_P_TUNING;
    if (cli->virtual_tokens_set && !virtual)
        return ft_errorf(err, errlen, "--virtual-tokens needs --peft prompt-tuning, prefix-tuning or p-tuning");
    if (virtual && !cli->virtual_tokens_set)
        return ft_errorf(err, errlen, "--peft %s needs --virtual-tokens N (PEFT's num_virtual_tokens has "
                                      "no default)", est_peft_name(run->peft));
    if (cli->encoder_hidden_set != (run->peft == EST_PEFT_P_TUNING))
        return ft_errorf(err, errlen, cli->encoder_hidden_set ? "--encoder-hidden needs --peft p-tuning"
                                                              : "--peft p-tuning needs --encoder-hidden H "
                                                                "(PEFT's encoder_hidden_size)");
    if (cli->encoder_hidden_set) run->encoder_hidden = cli->encoder_hidden;
    if (cli->adapter_len_set != (run->peft == EST_PEFT_ADAPTION_PROMPT))
        return ft_errorf(err, errlen, cli->adapter_len_set ? "--adapter-len needs --peft adaption-prompt"
                                                           : "--peft adaption-prompt needs --adapter-len A "
                                                             "(PEFT's adapter_len has no default)");
    if (cli->adapter_len_set) run->adapter_len = cli->adapter_len;
    if (cli->ia3_targets_set) run->ia3_targets = cli->ia3_targets;
    if (cli->ia3_feedforward_set) run->ia3_feedforward = cli->ia3_feedforward;
    else if (cli->ia3_targets_set) run->ia3_feedforward &= cli->ia3_targets;
    if (cli->virtual_tokens_set) run->virtual_tokens = cli->virtual_tokens;
    if (apply_vec(cli, run, err, errlen) < 0) return -1;
    if (est_cli_apply_pdelta(cli, run, err, errlen) < 0) return -1; /* LoHa, LoKr, OFT, FourierFT */
    if (cli->train_loop_set) run->train_loop = cli->train_loop;
    if (cli->empty_cache_steps_set) run->empty_cache_steps = cli->empty_cache_steps;
    if (cli->no_kv_cache) run->kv_cache_off = true;
    /* Like LoRA, PEFT's other methods run on the HF Trainer's path unless a
     * framework was asked for. */
    if ((est_peft_other(run) || cli->train_loop_set) && !cli->framework_set && !cli->ds_config[0] &&
        !cli->axolotl[0] && !cli->accelerate[0] && !cli->torchtune[0])
        run->framework = est_fw_trainer();
    return apply_lengths(cli, run, err, errlen);
}
