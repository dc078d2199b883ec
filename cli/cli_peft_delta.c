/* The flags of LoHa, LoKr, OFT and FourierFT (estimator/model/peft_delta.h)
 * applied to a run; each flag needs its method. */
#include "cli_peft.h"

#include "json_util.h"
#include "peft.h"
#include "peft_delta.h"

int est_cli_apply_pdelta(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    const bool on = est_pdelta_on(run);
    const bool ranked = run->peft == EST_PEFT_LOHA || run->peft == EST_PEFT_LOKR || run->peft == EST_PEFT_OFT;
    /* --peft-rank and --peft-targets without any method of theirs: cli_peft.c */
    if (on && cli->peft_rank_set && !ranked)
        return ft_errorf(err, errlen, "--peft-rank is LoHa's, LoKr's or OFT's r (FourierFT and WaveFT take "
                                      "--n-frequency)");
    if (cli->peft_alpha_set && run->peft != EST_PEFT_LOHA && run->peft != EST_PEFT_LOKR)
        return ft_errorf(err, errlen, "--peft-alpha needs --peft loha or lokr");
    if (cli->lokr_factor_set && run->peft != EST_PEFT_LOKR)
        return ft_errorf(err, errlen, "--lokr-factor needs --peft lokr");
    const bool spectral = run->peft == EST_PEFT_FOURIERFT || run->peft == EST_PEFT_WAVEFT;
    if (cli->n_frequency_set && !spectral)
        return ft_errorf(err, errlen, "--n-frequency needs --peft fourierft or waveft");
    if (!on) return 0;
    if (ranked && !cli->peft_rank_set)
        return ft_errorf(err, errlen, "--peft %s needs --peft-rank R", est_peft_name(run->peft));
    if (cli->peft_rank_set) run->pdelta.rank = cli->peft_rank;
    if (cli->peft_alpha_set) run->pdelta.alpha = cli->peft_alpha;
    if (cli->peft_targets_set) run->pdelta.targets = cli->peft_targets;
    if (cli->lokr_factor_set) {
        if (cli->lokr_factor == 0)
            return ft_errorf(err, errlen, "--lokr-factor must be -1 or a positive integer");
        run->pdelta.factor = cli->lokr_factor;
    }
    /* n_frequency's defaults: FourierFTConfig 1000, WaveFTConfig 2592 (config.py) */
    const int64_t fallback = run->peft == EST_PEFT_WAVEFT ? 2592 : 1000;
    run->pdelta.n_frequency = cli->n_frequency_set ? cli->n_frequency : fallback;
    return 0;
}
