/* DeepSpeed ZeRO's own host ops per step (frameworks/work_ds_host.c), derived
 * here by hand for two blocks of Llama-3.2-1B (tied embeddings) from
 * DeepSpeed 0.19.8's code as the file's comment lists it. */
#include <check.h>

#include "constants.h"
#include "step_build.h"
#include "timing.h"
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
 * ZeRO-2: each block's backward 12 per gradient (the CPU count of
 * calibrate/host/count_ds_host_ops.py: 253 - 145 = 108 per block of 9
 * tensors): 108; the embedding's and the head's backward 12 each; the step
 * 22 per gradient (198 per block of 9 in the CPU count: overflow check 13,
 * norm 4, flattening 1, then 4 after the last wait) over 2 x 9 + 1 + 1 = 20
 * tensors, and 58 per step (the 2-layer count's 536 less 22 x 21 tensors,
 * less the clip's and torch AdamW's own 16): 440 + 58 = 498; of them before
 * the step's last wait 18 per gradient and 50 per step (279 + 116 + 33 less
 * 18 x 21): 360 + 50 = 410. The step's ops are priced at 0.48 of a model
 * op's host time (measured on the CPU: calibrate/host/time_ds_step.py, 2.69
 * and 2.77 us per step op against 5.68 us per model op): 498 x 0.48 =
 * 239.04 and 410 x 0.48 = 196.8 ops' worth. */
START_TEST(test_zero2_two_blocks) {
    est_run run;
    est_constants k;
    est_constants_defaults(&k);
    build("2", "2026-11-gpu", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 0);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 108);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_BWD), 12);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_BWD), 12);
    ck_assert_double_eq_tol(ops(&run, EST_UNIT_OPTIMIZER), 239.04, 1e-9);
    ck_assert_double_eq_tol(est_ds_host_waited_ops(&run, &k, EST_UNIT_OPTIMIZER), 196.8, 1e-9);
    ck_assert_double_eq(est_ds_host_waited_ops(&run, &k, EST_UNIT_BLOCK_BWD), 0);
    build("1", "2026-11-gpu", "none", &run); /* the same ops, after backward */
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 108);
    ck_assert_double_eq_tol(ops(&run, EST_UNIT_OPTIMIZER), 239.04, 1e-9);
}
END_TEST

/* The step's waits through the ledger (timing.c): at a host cost per op h
 * small enough that the step's device work g outlasts what the host issues
 * after the last wait, the optimizer takes 196.8 h + g: the 410 ops before
 * the waits (at 0.48 of a model op each, above) add to the device's step
 * instead of hiding under it (without the waits: max(g, host) = g, no
 * change). */
START_TEST(test_zero2_step_waits_add) {
    est_run run;
    build("2", "2026-11-gpu", "none", &run);
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail free_host, slow_host;
    k.value[EST_K_KERNEL_HOST_S] = 0;
    est_time_model(&run, &k, &free_host);
    const double h = 1e-9;
    k.value[EST_K_KERNEL_HOST_S] = h;
    est_time_model(&run, &k, &slow_host);
    ck_assert(free_host.modelled && slow_host.optimizer_s > 0);
    ck_assert(free_host.optimizer_s > 1e4 * h); /* the device's step outlasts the rest */
    ck_assert_double_eq_tol(slow_host.optimizer_s - free_host.optimizer_s, 196.8 * h, 1e-12);
}
END_TEST

/* ZeRO-3 at one rank (_no_gather_coalesced: 4 ops per gathered tensor and
 * pass, view and record_stream, then the release's record_stream and
 * empty(0)), with the hooks' Python at 14 ops' worth per module call and
 * pass: a block's forward 2 x 13 (two detaches per call) + 4 x 7 + 14 x 13
 * = 26 + 28 + 182 = 236; its backward 28 + 10 x 9 (per gradient: bucket 4,
 * reduce-scatter 3, partition 3) + 182 = 300. The embedding (4 calls, 1
 * gathered): forward 8 + 4 + 56 = 68, backward 4 + 10 + 56 = 70; the head
 * (2 calls, none gathered, 1 gradient): forward 4 + 28 = 32, backward 10 +
 * 28 = 38; the step 6 per gradient over 20 and 1 per gathered tensor over 15
 * (7 per block and the embedding): 135, 3 per gradient before its last
 * read-back: 60. At 8 ranks the gathers are collectives, 9 ops per tensor
 * and pass: a block's forward 26 + 63 + 182 = 271. */
START_TEST(test_zero3_two_blocks) {
    est_run run;
    est_constants k;
    est_constants_defaults(&k);
    build("3", "2026-11-gpu", "none", &run);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 236);
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_BWD), 300);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_FWD), 68);
    ck_assert_double_eq(ops(&run, EST_UNIT_EMBED_BWD), 70);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_FWD), 32);
    ck_assert_double_eq(ops(&run, EST_UNIT_HEAD_BWD), 38);
    ck_assert_double_eq(ops(&run, EST_UNIT_OPTIMIZER), 135);
    ck_assert_double_eq(est_ds_host_waited_ops(&run, &k, EST_UNIT_OPTIMIZER), 60);
    ck_assert_double_eq(ops(&run, EST_UNIT_LOSS_BWD), 0);
    run.gpus_per_node = 8;
    ck_assert_double_eq(ops(&run, EST_UNIT_BLOCK_FWD), 271);
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
    tcase_add_test(tc, test_zero2_step_waits_add);
    tcase_add_test(tc, test_zero3_two_blocks);
    tcase_add_test(tc, test_not_counted);
    suite_add_tcase(s, tc);
    return s;
}
