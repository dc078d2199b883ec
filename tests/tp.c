/* Tensor parallelism (--tp; estimator/model/tp.c, block_tp.c,
 * frameworks/work_parallel.c est_work_tp_lanes): what one rank of a TP group
 * holds and saves for one Llama block, the collectives' bytes, and the
 * refusals. Every figure is derived here by hand from the shapes of
 * Llama-3-8B (models/llama3-8b.json: h 4096, 32 heads, 8 KV heads of 128,
 * MLP 14336) and from torchtitan's plan (models/llama3/infra/parallelize.py
 * apply_tp) with torch's DTensor styles (distributed/tensor/parallel/
 * style.py), never read back from the program. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "events.h"
#include "test_util.h"
#include "step_build.h"
#include "timing.h"
#include "tp.h"
#include "work_parallel.h"

/* bf16 weights and activations (FSDP2's MixedPrecisionPolicy, bf16 params) */
static const est_regime BF16 = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true,
                                .adapter = 2};

static est_run tp_run(int64_t tp) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_FSDP;
    run.fsdp_version = EST_FSDP2;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.micro_batch = 1;
    run.seq_len = 64;
    run.attention = EST_ATTN_FLASH;
    run.tp = tp;
    return run;
}

static est_module block_of(const est_run *run) {
    est_run local;
    est_module m;
    char err[256];
    ck_assert_msg(est_module_block(est_tp_view(run, &local), &BF16, false, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

/* Parameters of one rank's block. ColwiseParallel splits the output
 * features of wq (4096 x 4096), wk and wv (1024 x 4096 each), w1 and w3
 * (14336 x 4096 each); RowwiseParallel the input features of wo (4096 x
 * 4096) and w2 (4096 x 14336); the two norms (4096 each) stay whole:
 *   projections 4096 x (4096 + 1024 + 1024 + 4096) + 3 x 4096 x 14336
 *             = 41,943,040 + 176,160,768 = 218,103,808, over N,
 *   + 8,192 for the norms.
 * N = 2: 109,051,904 + 8,192 = 109,060,096 elements (218,120,192 bf16 bytes);
 * N = 4:  54,525,952 + 8,192 =  54,534,144 elements. */
START_TEST(test_block_params_per_rank) {
    est_run run = tp_run(2);
    est_module m = block_of(&run);
    ck_assert_int_eq(est_module_param_elems(&m), INT64_C(109060096));
    run = tp_run(4);
    m = block_of(&run);
    ck_assert_int_eq(est_module_param_elems(&m), INT64_C(54534144));
}
END_TEST

/* What one rank's block saves for backward, T = 64 tokens (b = 1, s = 64),
 * Ts = T / N tokens in the sequence-parallel regions, bf16 (c = 2) with the
 * norms in fp32 as LlamaRMSNorm computes them; Hq = 32 / N, Hkv = 8 / N,
 * F = 14336 / N; flash attention, no checkpointing, no KV cache.
 *  - each RMSNorm on Ts tokens: the fp32 input (pow's) 4 Ts h, rsqrt's
 *    output 4 Ts, the bf16 normalized input of weight * y 2 Ts h; two norms:
 *    2 (6 Ts h + 4 Ts);
 *  - each all-gathered norm output (T h, bf16), kept by wq/wk/wv (one
 *    tensor) and by w1/w3: 2 x 2 T h;
 *  - RoPE's cos and sin (s x 128 each, bf16): 2 x 2 s 128;
 *  - flash attention's q, k, v after RoPE and its output and log-sum-exp:
 *    2 T 128 (Hq + 2 Hkv) + 2 T Hq 128 + 4 Hq s;
 *  - the MLP: w1's and w3's outputs (SiLU's input, the product's other
 *    factor), SiLU's output, the product (w2's input): 4 x 2 T F;
 *  - the reduce-scatters' outputs and the residual adds save nothing.
 * N = 2 (Ts 32, Hq 16, Hkv 4, F 7168):
 *   1,573,120 + 1,048,576 + 32,768 + (393,216 + 262,144 + 4,096) + 3,670,016
 *   = 6,983,936 bytes.
 * N = 4 (Ts 16, Hq 8, Hkv 2, F 3584):
 *   786,560 + 1,048,576 + 32,768 + (196,608 + 131,072 + 2,048) + 1,835,008
 *   = 4,032,640 bytes.
 * N = 1 (no TP: the same terms, the norm outputs saved as they are):
 *   3,146,240 + 1,048,576 + 32,768 + (786,432 + 524,288 + 8,192) + 7,340,032
 *   = 12,886,528 bytes. */
START_TEST(test_block_saved_per_rank) {
    est_run run = tp_run(2);
    est_module m = block_of(&run);
    ck_assert_int_eq(est_module_saved_bytes(&m), INT64_C(6983936));
    run = tp_run(4);
    m = block_of(&run);
    ck_assert_int_eq(est_module_saved_bytes(&m), INT64_C(4032640));
    run = tp_run(1);
    run.kv_cache_off = true;
    m = block_of(&run);
    ck_assert_int_eq(est_module_saved_bytes(&m), INT64_C(12886528));
}
END_TEST

/* The sequence-parallel boundary: the block's input and output are Ts x h
 * (N = 4: 16 x 4096 = 65,536 elements) and its all-gathers make T x h
 * (262,144). */
START_TEST(test_block_sequence_shards) {
    est_run run = tp_run(4);
    est_module m = block_of(&run);
    ck_assert_int_eq(m.tensors[0].elems, 65536);
    int gathers = 0, scatters = 0;
    for (int i = 0; i < m.n_ops; i++) {
        const est_mtensor *o = &m.tensors[m.ops[i].out];
        if (!strcmp(m.ops[i].name, "all-gather (sequence)")) {
            gathers++;
            ck_assert_int_eq(o->elems, 262144);
        }
        if (!strcmp(m.ops[i].name, "reduce-scatter (sequence)")) {
            scatters++;
            ck_assert_int_eq(o->elems, 65536);
        }
    }
    ck_assert_int_eq(gathers, 2);
    ck_assert_int_eq(scatters, 2);
}
END_TEST

/* Collective bytes per block and rank. Forward: two all-gathers and two
 * reduce-scatters of T x h bf16 = 64 x 4096 x 2 = 524,288 bytes each; a
 * ring moves (N - 1) / N of it per rank: N = 2 -> 4 x 262,144 = 1,048,576
 * wire bytes; N = 4 -> 4 x 393,216 = 1,572,864. Backward: the same four
 * mirrored, eight under checkpointing (the recomputed forward's too). */
START_TEST(test_block_collective_bytes) {
    const int64_t tps[2] = {2, 4};
    const double fwd[2] = {1048576, 1572864};
    for (int i = 0; i < 2; i++) {
        est_run run = tp_run(tps[i]);
        const est_unit units[3] = {EST_UNIT_BLOCK_FWD, EST_UNIT_BLOCK_BWD, EST_UNIT_BLOCK_BWD};
        const double times[3] = {1, 1, 2};
        for (int u = 0; u < 3; u++) {
            est_step st;
            est_step_init(&st);
            est_step_unit(&st, units[u], 0);
            est_work_tp_lanes(&st, &run, units[u], u == 2);
            est_step_unit_end(&st);
            ck_assert_uint_eq(st.work_count, 1);
            const est_event *e = &st.work[0];
            const double W = e->u.lane.ranks;
            const double wire = e->u.lane.elems * e->u.lane.elem_bytes * (W - 1) / W;
            ck_assert_msg(wire == times[u] * fwd[i], "tp %lld unit %d: %g", (long long)tps[i], u, wire);
            ck_assert(e->u.lane.node_local && e->u.lane.blocking);
            est_step_free(&st);
        }
    }
}
END_TEST

/* The time of those collectives, which the compute waits for: on NCCL's
 * ring within the node, wire bytes / (NVLink x nccl_bus_efficiency) plus,
 * per collective, nccl_base_latency_s + (N - 1) nccl_nvlink_step_latency_s.
 * Only they depend on the NVLink figure and those latencies, so:
 *  - NVLink 450 -> 900 GB/s takes 1,048,576 x (1/450e9 - 1/900e9) / eff off
 *    a block's forward at N = 2 (the same off its backward);
 *  - 1 ms more base latency adds 4 ms to a block's forward (4 collectives)
 *    and 4 ms to its backward; 1 ms more per ring step adds 4 x (N - 1) ms:
 *    12 ms at N = 4. */
static est_time_detail timed(const est_run *run, const est_constants *k) {
    est_time_detail t;
    ck_assert_int_eq(est_time_model(run, k, &t), 0);
    return t;
}

START_TEST(test_collective_time) {
    est_run run = tp_run(2);
    run.attention = EST_ATTN_SDPA;
    est_constants k;
    char err[256];
    ck_assert_int_eq(est_estimate_constants(&run, &k, err, sizeof err), 0);
    const double eff = k.value[EST_K_NCCL_BUS_EFF];
    run.gpu.nvlink_gb_per_s = 450;
    const est_time_detail slow = timed(&run, &k);
    run.gpu.nvlink_gb_per_s = 900;
    const est_time_detail fast = timed(&run, &k);
    const double saved = 1048576.0 * (1 / 450e9 - 1 / 900e9) / eff;
    ck_assert_double_eq_tol(slow.block_fwd.gpu_s - fast.block_fwd.gpu_s, saved, 1e-12);
    ck_assert_double_eq_tol(slow.block_bwd.gpu_s - fast.block_bwd.gpu_s, saved, 1e-12);
    run = tp_run(4);
    run.attention = EST_ATTN_SDPA;
    const est_time_detail base = timed(&run, &k);
    est_constants k2 = k;
    k2.value[EST_K_NCCL_BASE_LAT_S] += 1e-3;
    const est_time_detail lat = timed(&run, &k2);
    ck_assert_double_eq_tol(lat.block_fwd.gpu_s - base.block_fwd.gpu_s, 4e-3, 1e-12);
    ck_assert_double_eq_tol(lat.block_bwd.gpu_s - base.block_bwd.gpu_s, 4e-3, 1e-12);
    k2 = k;
    k2.value[EST_K_NCCL_NVLINK_HOP_S] += 1e-3;
    const est_time_detail hop = timed(&run, &k2);
    ck_assert_double_eq_tol(hop.block_fwd.gpu_s - base.block_fwd.gpu_s, 12e-3, 1e-12);
}
END_TEST

/* FSDP2 shards over the data-parallel mesh: 8 GPUs at --tp 2 are 4 DP ranks. */
START_TEST(test_dp_degree) {
    est_run run = tp_run(2);
    ck_assert_int_eq(est_run_world(&run), 8);
    ck_assert_int_eq(est_run_dp(&run), 4);
    run.tp = 1;
    ck_assert_int_eq(est_run_dp(&run), 8);
}
END_TEST

/* FSDP2 over the data-parallel mesh: Adam's two fp32 moments of a rank's
 * shard. A TP rank holds 32 blocks of the parameters above, 1/N of the
 * embedding's and of the (untied) output's 128,256 x 4096, and the final
 * norm (4096); FSDP2 splits each of those by rows over world / N ranks
 * (every row count here divides evenly).
 * N = 2 (4 DP ranks): 32 x 109,060,096 + 2 x 64,128 x 4096 + 4096
 *   = 4,015,263,744; / 4 = 1,003,815,936; x 8 bytes = 8,030,527,488.
 * N = 4 (2 DP ranks): 32 x 54,534,144 + 2 x 32,064 x 4096 + 4096
 *   = 2,007,764,992; / 2 = 1,003,882,496; x 8 bytes = 8,031,059,968.
 * (Without TP: 8,030,261,248 / 8 x 8 = 8,030,261,248: the norms, whole on
 * every TP rank, are what TP adds.) */
START_TEST(test_fsdp_shard_of_a_rank) {
    const int64_t tps[2] = {2, 4}, want[2] = {INT64_C(8030527488), INT64_C(8031059968)};
    for (int i = 0; i < 2; i++) {
        est_run run = tp_run(tps[i]);
        run.attention = EST_ATTN_SDPA;
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], want[i]);
        est_estimate_free(&e);
    }
}
END_TEST

START_TEST(test_refusals) {
    const char *base = "--model llama3-8b --gpu h100 --gpus 8 --seq 2048";
    const char *cases[][2] = {
        {"--framework deepspeed --zero 3 --tp 2", "FSDP2 only"},
        {"--framework hf --tp 2", "FSDP2 only"},
        {"--framework fsdp --zero 3 --tp 2", "--fsdp-version 2"},
        {"--framework fsdp --fsdp-version 2 --zero 3 --tp 16", "TP across nodes"},
        {"--framework fsdp --fsdp-version 2 --zero 3 --tp 8 --gpus 8 --nodes 2 --lora-rank 16", "LoRA"},
        {"--framework fsdp --fsdp-version 2 --zero 3 --cp 2", "context parallelism"},
        {"--framework fsdp --fsdp-version 2 --zero 3 --tp 2 --seq 2047", "divide --seq"},
    };
    char cmd[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s %s", base, cases[i][0]);
        test_cmd_result *r = test_ftest(cmd);
        ck_assert_msg(r->status == 2, "%s: exit %d", cmd, r->status);
        ck_assert_int_eq(r->err_lines, 1);
        ck_assert_msg(strstr(r->err, cases[i][1]), "%s: %s", cmd, r->err);
    }
    const char *searches[][2] = {
        {"plan --tokens 2B --model llama3-8b --gpu h100 --gpus 8 --framework fsdp --fsdp-version 2 --zero 3 --tp 2",
         "plan with --tp"},
        {"--max-seq --model llama3-8b --gpu h100 --gpus 8 --framework fsdp --fsdp-version 2 --zero 3 --tp 2",
         "with --tp are not modelled"},
    };
    for (size_t i = 0; i < sizeof searches / sizeof searches[0]; i++) {
        test_cmd_result *r = test_ftest(searches[i][0]);
        ck_assert_msg(r->status == 2, "%s: exit %d", searches[i][0], r->status);
        ck_assert_msg(strstr(r->err, searches[i][1]), "%s: %s", searches[i][0], r->err);
    }
    /* heads: Llama-3-8B's 8 KV heads do not split 16 ways, nor 32 heads 3 ways */
    est_run run = tp_run(16);
    run.gpus_per_node = 16;
    char err[256];
    ck_assert_int_eq(est_tp_validate(&run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "KV heads"), "%s", err);
}
END_TEST

Suite *suite_tp(void);
Suite *suite_tp(void) {
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_block_params_per_rank);
    tcase_add_test(tc, test_block_saved_per_rank);
    tcase_add_test(tc, test_block_sequence_shards);
    tcase_add_test(tc, test_block_collective_bytes);
    tcase_add_test(tc, test_collective_time);
    tcase_add_test(tc, test_dp_degree);
    tcase_add_test(tc, test_fsdp_shard_of_a_rank);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return s;
}
