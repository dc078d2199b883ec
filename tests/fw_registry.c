/* The framework registry (estimator/fw_registry.h): what the rest
 * of the estimator may know about a framework. The expected answers are the
 * frameworks' own facts, written out here: PyTorch DDP (the HF Trainer
 * without DeepSpeed or FSDP) has no ZeRO stage and no offload; FSDP has no
 * stage that shards the optimizer states alone (its ShardingStrategy:
 * NO_SHARD, SHARD_GRAD_OP, FULL_SHARD) and its CPUOffload moves the
 * parameters with their optimizer states; DeepSpeed's CPU optimizers are
 * Adam, Adagrad and Lion (no SGD); ftrain has eager and flash attention. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "hf_modeling.h"
#include "run.h"
#include "strategy.h"
#include "test_util.h"

static const est_framework ALL_FW[] = {EST_FW_FTRAIN, EST_FW_HF, EST_FW_DEEPSPEED, EST_FW_FSDP};
#define FW_COUNT (sizeof ALL_FW / sizeof ALL_FW[0])

static est_run base_run(est_framework fw) {
    est_run r = test_run_of("qwen1.5-0.5b", "h100-80gb");
    r.framework = fw;
    r.gpus_per_node = 8;
    if (fw == EST_FW_FTRAIN) r.attention = EST_ATTN_FLASH;
    return r;
}

/* A feature a framework lacks is refused with that feature's own message
 * (never the registry's fallback line), and each feature is modelled by at
 * least one framework. */
START_TEST(every_missing_feature_has_its_message) {
    for (int f = 0; f < EST_FEAT_COUNT; f++) {
        int modelled_by = 0;
        for (size_t i = 0; i < FW_COUNT; i++) {
            est_run r = base_run(ALL_FW[i]);
            if (est_fw_has(&r, (est_fw_feature)f)) {
                modelled_by++;
                continue;
            }
            char err[300] = "";
            ck_assert_int_eq(est_fw_models(&r, (est_fw_feature)f, "x", err, sizeof err), -1);
            ck_assert_msg(err[0] && !strstr(err, "this feature is not modelled"),
                          "feature %d under %s: \"%s\"", f, est_framework_name(ALL_FW[i]), err);
        }
        ck_assert_msg(modelled_by > 0, "feature %d is modelled by no framework", f);
    }
}
END_TEST

/* Every strategy a search tries is a run its framework accepts, and each
 * list fits the searches' array. */
START_TEST(every_strategy_is_a_valid_run) {
    for (size_t i = 0; i < FW_COUNT; i++) {
        size_t listed = 0;
        for (const est_fw_strategy *s = est_fw_info_of(ALL_FW[i])->strategies; s->label; s++) listed++;
        ck_assert_uint_le(listed, EST_MAX_STRATEGIES);
        est_strategy list[EST_MAX_STRATEGIES];
        const size_t n = est_strategies(ALL_FW[i], list);
        ck_assert_uint_eq(n, listed);
        const est_run base = base_run(ALL_FW[i]);
        for (size_t j = 0; j < n; j++) {
            est_run r;
            est_strategy_apply(&list[j], &base, &r);
            char err[300] = "";
            ck_assert_msg(est_run_validate(&r, err, sizeof err) == 0, "%s's \"%s\": %s",
                          est_framework_name(ALL_FW[i]), list[j].label, err);
        }
    }
}
END_TEST

/* FSDP2 (torch fully_shard) has no NO_SHARD: every strategy its searches try
 * is a valid FSDP2 run, FULL_SHARD's and SHARD_GRAD_OP's places taken by
 * reshard_after_forward True (--zero 3) and False (--zero 2). */
START_TEST(fsdp2_strategies_are_fsdp2_runs) {
    est_run base = base_run(EST_FW_FSDP);
    base.fsdp_version = EST_FSDP2;
    base.stack = est_stack_find("2026-11");
    ck_assert_ptr_nonnull(base.stack);
    est_strategy list[EST_MAX_STRATEGIES];
    const size_t n = est_strategies_of_run(&base, list);
    ck_assert_uint_ge(n, 2);
    bool zero2 = false, zero3 = false;
    for (size_t j = 0; j < n; j++) {
        est_run r;
        est_strategy_apply(&list[j], &base, &r);
        char err[300] = "";
        ck_assert_msg(est_run_validate(&r, err, sizeof err) == 0, "\"%s\": %s", list[j].label, err);
        ck_assert_int_ne(list[j].zero, 0);
        zero2 |= list[j].zero == 2;
        zero3 |= list[j].zero == 3;
    }
    ck_assert(zero2 && zero3);
}
END_TEST

typedef struct {
    est_framework fw;
    int zero;
    est_offload offload;
    est_optimizer optimizer;
    est_attention attention;
    const char *refused; /* a phrase of the refusal, or NULL: accepted */
} sharding_case;

/* The sharding, offload and attention facts of the header comment. */
START_TEST(sharding_and_offload_follow_each_framework) {
    const est_offload NO = EST_OFFLOAD_NONE, OPT = EST_OFFLOAD_OPTIMIZER, ALL = EST_OFFLOAD_OPTIMIZER_PARAMS;
    const est_attention SDPA = EST_ATTN_SDPA, FLASH = EST_ATTN_FLASH;
    const sharding_case cases[] = {
        {EST_FW_HF, 1, NO, EST_OPT_ADAMW, SDPA, "no ZeRO"},
        {EST_FW_HF, 0, OPT, EST_OPT_ADAMW, SDPA, "cannot offload"},
        {EST_FW_HF, 0, NO, EST_OPT_ADAMW, SDPA, NULL},
        {EST_FW_FSDP, 1, NO, EST_OPT_ADAMW, SDPA, "no ZeRO-1"},
        {EST_FW_FSDP, 3, OPT, EST_OPT_ADAMW, SDPA, "together"},
        {EST_FW_FSDP, 3, ALL, EST_OPT_SGD, SDPA, NULL},
        {EST_FW_DEEPSPEED, 1, NO, EST_OPT_ADAMW, SDPA, NULL},
        {EST_FW_DEEPSPEED, 2, OPT, EST_OPT_SGD, SDPA, "no SGD"},
        {EST_FW_DEEPSPEED, 2, OPT, EST_OPT_ADAMW, SDPA, NULL},
        {EST_FW_FTRAIN, 3, OPT, EST_OPT_SGD, FLASH, NULL},
        {EST_FW_FTRAIN, 0, NO, EST_OPT_ADAMW, SDPA, "no sdpa"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const sharding_case *c = &cases[i];
        est_run r = base_run(c->fw);
        r.zero_stage = c->zero;
        r.offload = c->offload;
        r.optimizer = c->optimizer;
        r.attention = c->attention;
        char err[300] = "";
        const int rc = est_run_validate(&r, err, sizeof err);
        if (!c->refused) ck_assert_msg(rc == 0, "case %zu refused: %s", i, err);
        else ck_assert_msg(rc < 0 && strstr(err, c->refused), "case %zu: want \"%s\", got \"%s\"", i,
                           c->refused, err);
    }
}
END_TEST

/* The dtype regime the model code reads through the registry: plain PyTorch
 * keeps fp32 weights under torch.autocast, so the embedding's output and the
 * residual stream are fp32 (4 bytes); DeepSpeed casts the module to bf16, so
 * they are bf16 (2 bytes). */
START_TEST(autocast_only_over_master_weights) {
    est_run hf = base_run(EST_FW_HF), ds = base_run(EST_FW_DEEPSPEED);
    hf.precision = ds.precision = EST_PREC_BF16_MIXED;
    const est_dtypes dh = est_dtypes_of(&hf), dd = est_dtypes_of(&ds);
    ck_assert(dh.autocast);
    ck_assert_int_eq(dh.resid, 4);
    ck_assert(!dd.autocast);
    ck_assert_int_eq(dd.resid, 2);
}
END_TEST

Suite *suite_fw_registry(void);
Suite *suite_fw_registry(void) {
    Suite *s = suite_create("fw_registry");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, every_missing_feature_has_its_message);
    tcase_add_test(tc, every_strategy_is_a_valid_run);
    tcase_add_test(tc, fsdp2_strategies_are_fsdp2_runs);
    tcase_add_test(tc, sharding_and_offload_follow_each_framework);
    tcase_add_test(tc, autocast_only_over_master_weights);
    suite_add_tcase(s, tc);
    return s;
}
