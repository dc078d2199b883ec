/* DeepSpeed ZeRO's own host ops per step (frameworks/work_ds_host.c), derived
 * here by hand for two blocks of Llama-3.2-1B (tied embeddings) from
 * DeepSpeed 0.19.8's code as the file's comment lists it. */
#include <check.h>

#include "constants.h"
#include "work_ds_host.h"
#include "test_util.h"

static void build(const char *zero, const char *stack, const char *offload, est_run *run) {
    const char *argv[] = {"ftest", "--model", "llama3.2-1b", "--layers", "2", "--framework", "deepspeed",
                          "--zero", zero, "--stack", stack, "--offload", offload};
    char err[256];
    ck_assert_msg(test_cli_build(13, (char **)argv, run, err, sizeof err) == 0, "%s", err);
}

static double ops(const est_run *run, est_unit u) {
    est_constants k;
    est_constants_defaults(&k);
    return est_ds_host_ops(run, &k, u, NULL);
}

/* A block: q (2048 x 2048), k and v (512 x 2048), o, gate, up, down
 * (8192 x 2048) and two RMSNorm weights (2048): 9 tensors, all training,
 * 7 above ZeRO-3's persistence threshold of 1e5 elements; 13 module calls.
 * The embedding: its weight (128256 x 2048): 1 tensor, gathered; the
 * model, embed_tokens and rotary_emb and LlamaForCausalLM: 4 calls. The head:
 * the final norm (2048, kept whole); the LM head's weight is the embedding's
 * (tied): 1 tensor, none gathered; norm and lm_head: 2 calls.
 * ZeRO-2: each block's backward 10 per gradient (view_as 1, bucket copy 4,
 * partition copy 5): 90; the embedding's and the head's backward 10 each;
 * the step 6 per gradient (norm 4, flatten 2) over 2 x 9 + 1 + 1 = 20: 120. */
START_TEST(test_zero2_two_blocks) {
    est_run run;
    build("2", "2026-11-gpu", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 0);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 90);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_BWD), 10);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_BWD), 10);
    ck_assert_double_eq(ops(&run, EST_UNIT_OPTIMIZER), 120);
    build("1", "2026-11-gpu", "none", &run); /* the same ops, after backward */
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 90);
    ck_assert_double_eq(ops(&run, EST_UNIT_OPTIMIZER), 120);
}
END_TEST

/* ZeRO-3: a block's forward 2 per module call (two detaches) + 9 per
 * gathered tensor (gather 7, release 2): 26 + 63 = 89; its backward gathers
 * and releases again (63) and 10 per gradient (bucket 4, reduce-scatter 3,
 * partition 3: 90): 153. The embedding: forward 8 + 9 = 17, backward 9 + 10
 * = 19; the head: forward 4, backward 10; the step 3 per gradient (the
 * norm): 60. Per step: 2 x (89 + 153) + 17 + 19 + 4 + 10 + 60 = 594. */
START_TEST(test_zero3_two_blocks) {
    est_run run;
    build("3", "2026-11-gpu", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 89);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 153);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_FWD), 17);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_BWD), 19);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_FWD), 4);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_BWD), 10);
    ck_assert_double_eq(ops(&run, EST_UNIT_OPTIMIZER), 60);
    ck_assert_double_eq(ops(&run, EST_UNIT_LOSS_BWD), 0);
}
END_TEST

/* Not counted: DeepSpeed 0.14.2's stack (not read there), optimizer offload
 * (another path per parameter), ZeRO-0. */
START_TEST(test_not_counted) {
    est_run run;
    build("3", "2024-04", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 0);
    build("2", "2026-11-gpu", "optimizer", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 0);
    build("0", "2026-11-gpu", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 0);
}
END_TEST

Suite *suite_ds_host(void);
Suite *suite_ds_host(void) {
    Suite *s = suite_create("ds_host");
    TCase *tc = tcase_create("counts");
    tcase_add_test(tc, test_zero2_two_blocks);
    tcase_add_test(tc, test_zero3_two_blocks);
    tcase_add_test(tc, test_not_counted);
    suite_add_tcase(s, tc);
    return s;
}
