/* One step, two ledgers (estimator/ledger/events.h): the memory ledger and the time
 * ledger read the same event list, each only its own kind of event. A step
 * built by hand is priced by the formulas written out below; a profile's step
 * is checked for what every framework must describe; an event changed in a
 * profile's step moves exactly the ledger that reads it, by a hand-derived
 * amount. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "allocator_ledger.h"
#include "constants.h"
#include "gemm.h"
#include "memory_ledger.h"
#include "profiles.h"
#include "test_util.h"
#include "timing.h"
#include "stack.h"
#include "step_build.h"

/* Constants of round values, so the expected times below are easy to follow. */
static est_constants round_constants(void) {
    est_constants k;
    est_constants_defaults(&k);
    k.value[EST_K_ATTN_PEAK_EFF] = 0.5;
    k.value[EST_K_HBM_EFF] = 1;
    k.value[EST_K_KERNEL_GPU_S] = 1e-6;
    k.value[EST_K_KERNEL_HOST_S] = 1e-5;
    k.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 0;
    return k;
}

/* Closes a hand-built step with an "end" moment and replays it through the
 * caching allocator at its default configuration. */
static est_alloc_replay replay_at_defaults(est_step *st) {
    const int64_t live[EST_CAT_COUNT] = {0};
    est_step_moment(st, EST_PHASE_OPTIMIZER, -1, "end", live);
    ck_assert(!st->oom);
    est_alloc_config cfg;
    est_alloc_config_default(&cfg);
    est_alloc_replay r;
    char err[256];
    ck_assert_msg(est_allocator_ledger(st, &cfg, &r, err, sizeof err) == 0, "%s", err);
    return r;
}

/* A free through record_stream (DeepSpeed's and FSDP's side streams) keeps
 * its block active until the other stream has passed (the allocator's
 * process_events after the recorded event): CUDACachingAllocator.cpp
 * free() -> insert_events when block->stream_uses is not empty. By hand, three
 * 30 MiB tensors on the compute stream (large requests: 30 MiB is a multiple
 * of kRoundLarge's 2 MiB, so one segment of exactly 30 MiB each time a new one
 * is needed): A freed pending, B made and freed before the side stream catches
 * up cannot take A's block (a second segment, 60 MiB reserved and active);
 * after the sync, C takes a cached block (still 60 MiB). Freed at once, B and
 * C would have reused A's block: 30 MiB reserved. */
START_TEST(test_pending_free_holds_its_block) {
    const int64_t MIB30 = 30 * 1048576;
    est_step st;
    est_step_init(&st);
    int32_t a = est_step_tensor(&st, EST_CAT_COMM, MIB30, "A", 0);
    est_step_tensor_free(&st, a, true);
    int32_t b = est_step_tensor(&st, EST_CAT_COMM, MIB30, "B", 0);
    est_step_tensor_free(&st, b, false);
    est_step_sync(&st);
    int32_t c = est_step_tensor(&st, EST_CAT_COMM, MIB30, "C", 0);
    est_step_tensor_free(&st, c, false);
    est_alloc_replay r = replay_at_defaults(&st);
    ck_assert_int_eq(r.peak_reserved_bytes, 2 * MIB30);
    ck_assert_int_eq(r.peak_active_bytes, 2 * MIB30);
    /* allocated_bytes drops at free() itself, before the recorded event */
    ck_assert_int_eq(r.peak_allocated_bytes, MIB30);
    est_step_free(&st);
}
END_TEST

/* A free recorded on a virtual stream (events.h EST_STREAM_VIRTUAL: "the
 * compute stream at this point", which a seam syncs when the host waited for
 * it) outlives an ordinary sync. By hand, 30 MiB tensors on side stream 1 (one
 * 30 MiB segment each time a new one is needed, as above): A freed on virtual
 * stream V; after an ordinary sync B cannot take A's block (a second segment,
 * 60 MiB); B is freed at once. Once V is synced, C and D, live together, take
 * the two cached blocks: 60 MiB. Without V's sync D would need a third (90). */
START_TEST(test_virtual_stream_free_waits_for_its_sync) {
    const int64_t MIB30 = 30 * 1048576;
    for (int synced = 0; synced <= 1; synced++) {
        est_step st;
        est_step_init(&st);
        int32_t a = est_step_tensor(&st, EST_CAT_COMM, MIB30, "A", 1);
        est_step_tensor_free_on(&st, a, EST_STREAM_VIRTUAL + 3);
        est_step_sync(&st);
        int32_t b = est_step_tensor(&st, EST_CAT_COMM, MIB30, "B", 1);
        est_step_tensor_free(&st, b, false);
        if (synced) est_step_sync_stream(&st, EST_STREAM_VIRTUAL + 3);
        int32_t c = est_step_tensor(&st, EST_CAT_COMM, MIB30, "C", 1);
        int32_t d = est_step_tensor(&st, EST_CAT_COMM, MIB30, "D", 1);
        est_step_tensor_free(&st, c, false);
        est_step_tensor_free(&st, d, false);
        est_alloc_replay r = replay_at_defaults(&st);
        ck_assert_int_eq(r.peak_reserved_bytes, (synced ? 2 : 3) * MIB30);
        est_step_free(&st);
    }
}
END_TEST

/* A step written by hand: load, one block forward, the optimizer. */
START_TEST(test_hand_built_step) {
    est_run run = test_run_of("llama3-8b", "a100-80gb");
    run.precision = EST_PREC_BF16_MIXED;
    run.grad_accum = 3;
    const est_constants k = round_constants();
    est_step st;
    est_step_init(&st);
    int64_t live[EST_CAT_COUNT] = {0};
    live[EST_CAT_PARAMS] = 1000;
    est_step_moment(&st, EST_PHASE_INIT, -1, "loaded", live);
    live[EST_CAT_ACTIVATIONS] = 500;
    est_step_moment(&st, EST_PHASE_FORWARD, 0, "forward layer 0", live);
    est_step_unit(&st, EST_UNIT_BLOCK_FWD, 0);
    est_step_gemm(&st, 4096, 4096, 4096, 2, 1, 1);
    est_step_memory_op(&st, 1e9, 2);
    est_step_unit_end(&st);
    live[EST_CAT_ACTIVATIONS] = 0;
    live[EST_CAT_OPTIMIZER] = 200;
    est_step_moment(&st, EST_PHASE_OPTIMIZER, -1, "optimizer", live);
    est_step_unit(&st, EST_UNIT_OPTIMIZER, -1);
    est_step_memory_op(&st, 2e9, 1);
    est_step_unit_end(&st);
    ck_assert(!st.oom);

    est_timeline tl;
    est_timeline_init(&tl);
    char err[128];
    ck_assert_int_eq(est_memory_ledger(&st, &tl, err, sizeof err), 0);
    ck_assert_uint_eq(tl.count, 3);
    ck_assert_int_eq(tl.phases[1].bytes[EST_CAT_ACTIVATIONS], 500);
    ck_assert_int_eq(tl.phases[2].bytes[EST_CAT_OPTIMIZER], 200);
    ck_assert_int_eq(tl.phases[2].bytes[EST_CAT_PARAMS], 1000);
    ck_assert_uint_eq(est_timeline_peak(&tl), 1); /* 1500 bytes */

    est_time_detail t;
    ck_assert_int_eq(est_time_ledger(&run, &st, &k, &t, &tl), 0);
    ck_assert(t.modelled);
    /* The A100's measured matmul ceiling (MAMF: 271.2 TFLOP/s at M, N, K =
     * 1024, 10240, 5120, where 128x256 tiles make 320 blocks in 3 waves of 108
     * SMs: 320/324 of full tiles in full waves). Its SMs need a reuse of
     * 271.2e12 / 2 / 108 / (5120 B/clk x 1.41 GHz / 108 / 2 B) = 37.6
     * multiply-adds per element; a 128x64 tile reuses 128*64/192 = 42.7, so
     * 4096^3 runs 32 x 64 = 2048 of them in 19 waves of 108: 2048/2052. HBM
     * at the catalog's bandwidth. */
    const double bw = run.gpu.hbm_gb_per_s * 1e9;
    const double full = 271.2e12 / (320.0 / 324.0), n = 4096;
    const double gemm = fmax(2 * n * n * n / (full * 2048.0 / 2052.0), 2 * 3 * n * n / bw);
    const double unit_gpu = gemm + 1e9 / bw + 3 * 1e-6, unit_host = 3 * 1e-5;
    const double unit = fmax(unit_gpu, unit_host);
    const double opt = fmax(2e9 / bw + 1e-6, 1e-5);
    ck_assert_close(t.block_fwd.gpu_s, unit_gpu, 0, 1e-12);
    ck_assert_close(t.block_fwd.flops, 2 * n * n * n, 0, 1e-15);
    ck_assert_close(t.microbatch_s, unit, 0, 1e-12);
    ck_assert_close(t.optimizer_s, opt, 0, 1e-12);
    ck_assert_close(t.step_s, 3 * unit + opt, 0, 1e-12);
    /* Each unit is booked on the moment before it. */
    ck_assert_close(tl.phases[1].time_s, unit, 0, 1e-12);
    ck_assert_close(tl.phases[2].time_s, opt, 0, 1e-12);
    ck_assert(tl.phases[0].time_s == 0);
    est_timeline_free(&tl);
    est_step_free(&st);
}
END_TEST

/* One causal attention op of Llama-3.2-1B (32 heads of 64) at b = 1, s = 8192
 * on an H100 SXM (989.4 TFLOP/s dense BF16), under bf16 autocast and SDPA
 * with no padding mask, priced by hand from the kernels' H100 figures
 * (Shah et al. 2024, arXiv 2407.08608, Fig. 5b causal forward and Fig. 6a
 * backward, head dim 64, seq 8k): FLOPs 4 b s^2 (heads x 64) / 2 forward,
 * 2.5 times that backward. On the 2026-11-gpu stack (torch 2.11) SDPA runs
 * cuDNN's kernel: 379 TFLOP/s forward, 432 backward; on 2025-02 (torch 2.6)
 * the flash kernel (FlashAttention-2): 295 and 287. The bytes (q, k, v, o:
 * 8192 x (2 x 2048 + 2 x 512) x 2 B = 84 MB, 25 us at 3.35 TB/s) stay under
 * the compute (> 700 us). One kernel forward, two backward, 1 us each. */
static double attention_op_s(const char *stack, bool backward) {
    est_run run = test_run_of("llama3.2-1b", "h100-sxm");
    run.precision = EST_PREC_BF16_MIXED;
    run.attention = EST_ATTN_SDPA;
    run.padding_mask = false;
    run.packed = false;
    run.seq_len = 8192;
    run.micro_batch = 1;
    run.stack = est_stack_find(stack);
    ck_assert_ptr_nonnull(run.stack);
    const est_constants k = round_constants();
    est_step st;
    est_step_init(&st);
    int64_t live[EST_CAT_COUNT] = {0};
    est_step_moment(&st, EST_PHASE_FORWARD, 0, "forward layer 0", live);
    est_step_unit(&st, backward ? EST_UNIT_BLOCK_BWD : EST_UNIT_BLOCK_FWD, 0);
    est_event *e = est_step_add(&st, EST_EV_ATTENTION);
    ck_assert_ptr_nonnull(e);
    e->u.attn.flops = 4.0 * 8192 * 8192 * 2048 * 0.5;
    e->u.attn.bytes = 8192.0 * (2 * 2048 + 2 * 512) * 2;
    e->u.attn.kernels = backward ? 2 : 1;
    e->u.attn.backward = backward;
    est_step_unit_end(&st);
    ck_assert(!st.oom);
    est_time_detail t;
    ck_assert_int_eq(est_time_ledger(&run, &st, &k, &t, NULL), 0);
    ck_assert(t.modelled);
    est_step_free(&st);
    return backward ? t.block_bwd.gpu_s : t.block_fwd.gpu_s;
}

START_TEST(test_attention_op_on_h100_by_hand) {
    const double fwd_flops = 4.0 * 8192 * 8192 * 2048 / 2; /* 274.9 GFLOP */
    ck_assert_close(attention_op_s("2026-11-gpu", false), fwd_flops / 379e12 + 1e-6, 0, 1e-9);
    ck_assert_close(attention_op_s("2026-11-gpu", true), 2.5 * fwd_flops / 432e12 + 2e-6, 0, 1e-9);
    ck_assert_close(attention_op_s("2025-02", false), fwd_flops / 295e12 + 1e-6, 0, 1e-9);
    ck_assert_close(attention_op_s("2025-02", true), 2.5 * fwd_flops / 287e12 + 2e-6, 0, 1e-9);
}
END_TEST

/* Work outside a unit is a bug of the emitter: the step says so. */
START_TEST(test_work_outside_a_unit_is_refused) {
    est_step st;
    est_step_init(&st);
    est_step_gemm(&st, 1, 1, 1, 2, 1, 1);
    ck_assert(st.oom);
    est_timeline tl;
    est_timeline_init(&tl);
    char err[128];
    ck_assert_int_eq(est_memory_ledger(&st, &tl, err, sizeof err), -1);
    est_timeline_free(&tl);
    est_step_free(&st);
}
END_TEST

typedef struct { est_framework fw; int zero; } fw_case;
static const fw_case CASES[] = {
    {EST_FW_HF, 0},   {EST_FW_DEEPSPEED, 0}, {EST_FW_DEEPSPEED, 1}, {EST_FW_DEEPSPEED, 2},
    {EST_FW_DEEPSPEED, 3}, {EST_FW_FSDP, 0}, {EST_FW_FSDP, 2}, {EST_FW_FSDP, 3},
    {EST_FW_FTRAIN, 0}, {EST_FW_FTRAIN, 3}};

static est_run case_run(const fw_case *c) {
    est_run run = test_run_of("tiny-llama", "a100-80gb");
    run.framework = c->fw;
    run.zero_stage = c->zero;
    run.gpus_per_node = 4;
    run.grad_accum = 2;
    run.precision = EST_PREC_BF16_MIXED;
    if (run.framework == EST_FW_FTRAIN) run.attention = EST_ATTN_FLASH;
    return run;
}

/* Every framework describes the whole step: each block's forward and
 * backward in order, the embedding, head and loss, one reduction and one
 * optimizer step, each after a moment. */
START_TEST(test_every_profile_describes_every_unit) {
    const fw_case *c = &CASES[_i];
    est_run run = case_run(c);
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    char err[256];
    ck_assert_msg(est_step_build(&run, &k, &st, err, sizeof err) == 0, "%s z%d: %s", est_framework_name(c->fw), c->zero, err);
    int count[EST_UNIT_COUNT] = {0};
    int32_t next_fwd = 0, next_bwd = (int32_t)run.layers_used - 1;
    size_t moments = 0;
    for (size_t i = 0; i < st.count; i++) {
        const est_event *e = &st.events[i];
        if (e->kind == EST_EV_MOMENT) moments++;
        if (e->kind != EST_EV_UNIT) continue;
        ck_assert_msg(moments > 0, "%s: a unit before any moment", est_framework_name(c->fw));
        const est_unit_ref *u = &st.units[e->u.unit.ref];
        ck_assert_uint_eq(u->moment, moments - 1);
        count[u->unit]++;
        if (u->unit == EST_UNIT_BLOCK_FWD) ck_assert_int_eq(u->layer, next_fwd++);
        if (u->unit == EST_UNIT_BLOCK_BWD) ck_assert_int_eq(u->layer, next_bwd--);
    }
    for (int u = 0; u < EST_UNIT_COUNT; u++) {
        int want = u == EST_UNIT_BLOCK_FWD || u == EST_UNIT_BLOCK_BWD ? (int)run.layers_used : 1;
        ck_assert_msg(count[u] == want, "%s z%d: %d units %s, want %d", est_framework_name(c->fw), c->zero, count[u],
                      est_unit_names[u], want);
    }
    est_step_free(&st);
}
END_TEST

/* A profile's step through both ledgers: as many timeline moments as moment
 * events, and the time booked on them adds up to the step. */
START_TEST(test_ledgers_read_the_same_step) {
    const fw_case *c = &CASES[_i];
    est_run run = case_run(c);
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    char err[256];
    ck_assert_int_eq(est_step_build(&run, &k, &st, err, sizeof err), 0);
    est_timeline tl;
    est_timeline_init(&tl);
    ck_assert_int_eq(est_memory_ledger(&st, &tl, err, sizeof err), 0);
    size_t moments = 0;
    for (size_t i = 0; i < st.count; i++) moments += st.events[i].kind == EST_EV_MOMENT;
    ck_assert_uint_eq(tl.count, moments);
    est_time_detail t;
    est_time_ledger(&run, &st, &k, &t, &tl);
    ck_assert(t.modelled && t.step_s > 0);
    double micro = 0, once = 0;
    for (size_t i = 0; i < tl.count; i++) {
        const est_phase *p = &tl.phases[i];
        bool mb = p->kind == EST_PHASE_FORWARD || p->kind == EST_PHASE_LOSS || p->kind == EST_PHASE_BACKWARD;
        if (mb) micro += p->time_s;
        else once += p->time_s;
    }
    ck_assert_close(run.grad_accum * micro + once, t.step_s, 0, 1e-12);
    est_timeline_free(&tl);
    est_step_free(&st);
}
END_TEST

/* Changing one memory event moves the memory ledger by exactly its bytes and
 * leaves the time alone; changing one work event moves the time by exactly
 * its cost and leaves the memory alone. */
START_TEST(test_each_ledger_reads_only_its_events) {
    est_run run = test_run_of("llama3-8b", "a100-80gb");
    run.precision = EST_PREC_BF16_MIXED;
    run.seq_len = 4096;
    run.grad_accum = 2;
    const est_constants k = round_constants();
    est_step st;
    est_step_init(&st);
    char err[256];
    ck_assert_int_eq(est_step_build(&run, &k, &st, err, sizeof err), 0);
    est_timeline before, after;
    est_timeline_init(&before);
    est_timeline_init(&after);
    ck_assert_int_eq(est_memory_ledger(&st, &before, err, sizeof err), 0);
    est_time_detail t0, t1;
    est_time_ledger(&run, &st, &k, &t0, NULL);

    /* The first allocation of parameters, one GiB larger: every moment holds one GiB more. */
    est_event *alloc = NULL;
    for (size_t i = 0; i < st.count && !alloc; i++)
        if (st.events[i].kind == EST_EV_ALLOC && st.events[i].u.mem.category == EST_CAT_PARAMS)
            alloc = &st.events[i];
    ck_assert_ptr_nonnull(alloc);
    alloc->u.mem.bytes += (int64_t)1 << 30;
    ck_assert_int_eq(est_memory_ledger(&st, &after, err, sizeof err), 0);
    for (size_t i = 0; i < after.count; i++)
        ck_assert_int_eq(after.phases[i].bytes[EST_CAT_PARAMS] - before.phases[i].bytes[EST_CAT_PARAMS],
                         (int64_t)1 << 30);
    est_time_ledger(&run, &st, &k, &t1, NULL);
    ck_assert(t1.step_s == t0.step_s);
    alloc->u.mem.bytes -= (int64_t)1 << 30;

    /* The block forward's first GEMM done twice: every block's forward (they
     * share the body) takes that GEMM's time once more, each micro-batch. */
    const est_unit_ref *unit = NULL;
    for (size_t i = 0; i < st.unit_count && !unit; i++)
        if (st.units[i].unit == EST_UNIT_BLOCK_FWD) unit = &st.units[i];
    ck_assert_ptr_nonnull(unit);
    est_event *g = &st.work[unit->body];
    ck_assert_int_eq(g->kind, EST_EV_GEMM);
    const double M = g->u.gemm.M, K = g->u.gemm.K, N = g->u.gemm.N, c = g->u.gemm.elem_bytes;
    /* That GEMM's time by the GEMM model (tested apart, tests/gemm.c). */
    const est_gemm_device dev = est_gemm_device_of(&run.gpu, c, run.gpu.hbm_gb_per_s * 1e9);
    const double gemm = est_gemm_time_s(&dev, M, K, N, c, 1);
    const double launches = g->u.gemm.kernels;
    g->u.gemm.count *= 2;
    g->u.gemm.kernels *= 2; /* twice, each in its own launch */
    ck_assert_int_eq(est_memory_ledger(&st, &after, err, sizeof err), 0);
    for (size_t i = 0; i < after.count; i++)
        ck_assert(!memcmp(after.phases[i].bytes, before.phases[i].bytes, sizeof after.phases[i].bytes));
    est_time_ledger(&run, &st, &k, &t1, NULL);
    /* One GPU, no collectives: a block's forward is device-bound at this length. */
    ck_assert(t0.block_fwd.gpu_s > t0.block_fwd.host_s);
    const double once = launches * (gemm + 1e-6); /* and its launch gap (round_constants) */
    ck_assert_close(t1.step_s - t0.step_s, run.grad_accum * run.layers_used * once, 0, 1e-9);
    est_timeline_free(&before);
    est_timeline_free(&after);
    est_step_free(&st);
}
END_TEST

/* Every block does the same work: its body is stored once. */
START_TEST(test_repeated_blocks_share_their_body) {
    est_run run = test_run_of("llama3-8b", "a100-80gb");
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    char err[256];
    ck_assert_int_eq(est_step_build(&run, &k, &st, err, sizeof err), 0);
    size_t first = (size_t)-1;
    int blocks = 0;
    for (size_t i = 0; i < st.count; i++) {
        const est_event *e = &st.events[i];
        if (e->kind != EST_EV_UNIT || st.units[e->u.unit.ref].unit != EST_UNIT_BLOCK_FWD) continue;
        const est_unit_ref *u = &st.units[e->u.unit.ref];
        if (first == (size_t)-1) first = u->body;
        ck_assert_uint_eq(u->body, first);
        ck_assert_uint_gt(u->body_len, 7); /* seven projections and more */
        blocks++;
    }
    ck_assert_int_eq(blocks, 32);
    est_step_free(&st);
}
END_TEST

Suite *suite_ledgers(void);
Suite *suite_ledgers(void) {
    Suite *s = suite_create("ledgers");
    TCase *tc = tcase_create("ledgers");
    tcase_add_test(tc, test_hand_built_step);
    tcase_add_test(tc, test_attention_op_on_h100_by_hand);
    tcase_add_test(tc, test_pending_free_holds_its_block);
    tcase_add_test(tc, test_virtual_stream_free_waits_for_its_sync);
    tcase_add_test(tc, test_work_outside_a_unit_is_refused);
    tcase_add_loop_test(tc, test_every_profile_describes_every_unit, 0, (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_loop_test(tc, test_ledgers_read_the_same_step, 0, (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_test(tc, test_each_ledger_reads_only_its_events);
    tcase_add_test(tc, test_repeated_blocks_share_their_body);
    suite_add_tcase(s, tc);
    return s;
}
