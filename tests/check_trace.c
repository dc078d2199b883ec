/* cpu-trace records (issue 22, docs/records.md "cpu-trace"): ftest reads what
 * calibrate/probes/cpu_truth.py writes, and `ftest check` compares them like
 * with like: the estimate's allocated bytes less the cuBLAS workspace, per
 * phase and per layer moment, with the phase of the peak. The expected
 * numbers are derived by hand below from timelines built by hand. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_records.h"
#include "check_trace.h"
#include "record.h"
#include "test_util.h"

#define MIB (INT64_C(1) << 20)

/* A cpu-trace record as the runner writes it (trimmed to what ftest reads):
 * a two-layer model inline, a pinned DeepSpeed config, one traced rank. */
static const char *record_line(const char *tolerance) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"schema\":\"ftest.record/1\",\"source\":\"cpu_truth.py 1 (git test)\","
             "\"date\":\"2026-11-25\",\"framework\":\"deepspeed\","
             "\"method\":\"traced without a GPU (cpu-trace): rank 1 of 2 in one CPU process\","
             "\"stack\":{},\"hardware\":{\"gpu\":\"h100-80gb\",\"gpus_per_node\":2,\"nodes\":1},"
             "\"config\":{\"model\":\"t\",\"model_config\":{\"model_type\":\"llama\","
             "\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":64,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"max_position_embeddings\":128},"
             "\"micro_batch\":2,\"grad_accum\":1,\"seq_len\":16,\"precision\":\"fp32\",\"zero\":2,"
             "\"attention\":\"eager\",\"probe_mode\":\"cpu-trace deepspeed\","
             "\"deepspeed\":{\"train_micro_batch_size_per_gpu\":2,\"gradient_accumulation_steps\":1,"
             "\"zero_optimization\":{\"stage\":2,\"reduce_bucket_size\":200000,"
             "\"allgather_bucket_size\":150000,\"stage3_max_live_parameters\":300000,"
             "\"stage3_max_reuse_distance\":250000,\"stage3_param_persistence_threshold\":1000}}},"
             "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":1,\"peak_allocated_bytes\":1048576,"
             "\"peak_phase\":\"backward\",\"trace\":{\"phase_peak_bytes\":{\"init\":1000,"
             "\"forward\":900000,\"backward\":1048576,\"optimizer\":700000},"
             "\"forward_layer_bytes\":[500000,600000],\"backward_layer_bytes\":[null,400000],"
             "\"backward_layer_peak_bytes\":[null,1048576]}}]},"
             "\"notes\":\"deepspeed t N2 fp32 z2\"%s}\n",
             tolerance ? tolerance : "");
    return buf;
}

START_TEST(test_trace_record_is_read) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const char *line = record_line(NULL);
    est_record rec;
    ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert(rec.cpu_trace);
    ck_assert_str_eq(rec.probe_mode, "cpu-trace deepspeed");
    ck_assert_str_eq(rec.notes, "deepspeed t N2 fp32 z2");
    /* The pinned DeepSpeed settings reach the run description. */
    ck_assert_int_eq(rec.run.ds.reduce_bucket_elems, 200000);
    ck_assert_int_eq(rec.run.ds.allgather_bucket_elems, 150000);
    ck_assert_int_eq(rec.run.ds.max_live_elems, 300000);
    ck_assert_int_eq(rec.run.ds.max_reuse_distance_elems, 250000);
    ck_assert_int_eq(rec.run.ds.persistence_elems, 1000);
    const est_rank_trace *t = &rec.ranks[0].trace;
    ck_assert(t->present);
    ck_assert_int_eq(t->layers, 2);
    ck_assert_int_eq(t->phase_peak[0], 1000);
    ck_assert_int_eq(t->phase_peak[3], 700000);
    ck_assert_int_eq(t->forward_layer[1], 600000);
    ck_assert_int_eq(t->backward_layer[0], -1); /* null: not sampled */
    ck_assert_int_eq(t->backward_layer_peak[1], 1048576);
    ck_assert_str_eq(rec.ranks[0].peak_phase, "backward");
    est_record_free(&rec);

    /* A measured record is not a trace; a bad layer sample is refused. */
    const char *gpu_line = "{\"schema\":\"ftest.record/1\",\"source\":\"x\",\"framework\":\"hf\","
                           "\"method\":\"measured on 1 real GPU\",\"hardware\":{\"gpu\":\"h100-80gb\","
                           "\"gpus_per_node\":1,\"nodes\":1},\"config\":{\"model\":\"tiny-llama\"},"
                           "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":0,"
                           "\"peak_allocated_bytes\":5}]}}";
    ck_assert_msg(est_record_parse(gpu_line, strlen(gpu_line), &cat, &rec, err, sizeof err) == 0, "%s",
                  err);
    ck_assert(!rec.cpu_trace);
    est_record_free(&rec);
    char bad[4096];
    snprintf(bad, sizeof bad, "%s", record_line(NULL));
    char *at = strstr(bad, "[500000,600000]");
    memcpy(at, "[500000,-60000]", 15);
    ck_assert_int_eq(est_record_parse(bad, strlen(bad), &cat, &rec, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "forward_layer_bytes[1]"), "%s", err);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* A timeline by hand, each moment's bytes per category:
 *   init       params 10 MiB, workspace 0
 *   forward 0  params 10, activations 20, workspace 8.125 (cuBLAS)       visible 30
 *   loss       params 10, activations 25, logits 6, workspace 8.125      visible 41 (forward)
 *   loss bwd   params 10, activations 25, logits 8, workspace 8.125      visible 43 (backward)
 *   backward 0 params 10, activations 24, grads 10, workspace 8.125      visible 44 (backward)
 *   optimizer  params 10, grads 10, optimizer 20, workspace 8.125 + 2    visible 42
 * The optimizer moment's workspace holds 2 MiB of foreach temporaries
 * beside the cuBLAS workspace: only the cuBLAS part is taken away. */
static void hand_estimate(est_estimate *e) {
    est_estimate_init(e);
    e->k.value[EST_K_CUBLAS_WORKSPACE_BYTES] = 8519680; /* 8.125 MiB */
    const int64_t ws = 8519680;
    int64_t b[EST_CAT_COUNT];
#define ROW(kind, layer, label, ...)                                   \
    do {                                                           \
        memset(b, 0, sizeof b);                                    \
        __VA_ARGS__;                                               \
        ck_assert_ptr_nonnull(est_timeline_push(&e->tl, kind, layer, label, b)); \
    } while (0)
    ROW(EST_PHASE_INIT, -1, "model loaded", b[EST_CAT_PARAMS] = 10 * MIB);
    ROW(EST_PHASE_FORWARD, 0, "forward layer 0", b[EST_CAT_PARAMS] = 10 * MIB;
        b[EST_CAT_ACTIVATIONS] = 20 * MIB; b[EST_CAT_WORKSPACE] = ws);
    ROW(EST_PHASE_LOSS, -1, "loss", b[EST_CAT_PARAMS] = 10 * MIB; b[EST_CAT_ACTIVATIONS] = 25 * MIB;
        b[EST_CAT_LOGITS] = 6 * MIB; b[EST_CAT_WORKSPACE] = ws);
    ROW(EST_PHASE_LOSS, -1, "loss backward", b[EST_CAT_PARAMS] = 10 * MIB;
        b[EST_CAT_ACTIVATIONS] = 25 * MIB; b[EST_CAT_LOGITS] = 8 * MIB; b[EST_CAT_WORKSPACE] = ws);
    ROW(EST_PHASE_BACKWARD, 0, "backward layer 0", b[EST_CAT_PARAMS] = 10 * MIB;
        b[EST_CAT_ACTIVATIONS] = 24 * MIB; b[EST_CAT_GRADS] = 10 * MIB; b[EST_CAT_WORKSPACE] = ws);
    ROW(EST_PHASE_OPTIMIZER, -1, "optimizer step", b[EST_CAT_PARAMS] = 10 * MIB;
        b[EST_CAT_GRADS] = 10 * MIB; b[EST_CAT_OPTIMIZER] = 20 * MIB;
        b[EST_CAT_WORKSPACE] = ws + 2 * MIB);
#undef ROW
}

START_TEST(test_trace_compare_by_hand) {
    est_estimate e;
    hand_estimate(&e);
    /* The phases a trace names. */
    ck_assert_int_eq(est_trace_phase_of(&e.tl.phases[0]), 0);
    ck_assert_int_eq(est_trace_phase_of(&e.tl.phases[2]), 1); /* the loss forward */
    ck_assert_int_eq(est_trace_phase_of(&e.tl.phases[3]), 2); /* the loss backward */
    ck_assert_int_eq(est_trace_phase_of(&e.tl.phases[5]), 3);
    int64_t unseen = 0;
    ck_assert_int_eq(est_trace_visible_bytes(&e.tl.phases[5], &e, &unseen), 42 * MIB);
    ck_assert_int_eq(unseen, 8519680);
    ck_assert_int_eq(est_trace_visible_bytes(&e.tl.phases[0], &e, &unseen), 10 * MIB);
    ck_assert_int_eq(unseen, 0);

    /* A traced rank: peak 40 MiB in backward; phases forward 40, backward 40,
     * optimizer 42; after layer 0's forward 30 MiB; layer 0's backward at most
     * 48 MiB. */
    est_rank_measure m;
    memset(&m, 0, sizeof m);
    m.peak_allocated_bytes = 40 * MIB;
    m.peak_active_bytes = -1;
    snprintf(m.peak_phase, sizeof m.peak_phase, "backward");
    m.trace.present = true;
    m.trace.layers = 1;
    m.trace.phase_peak[0] = -1;
    m.trace.phase_peak[1] = 40 * MIB;
    m.trace.phase_peak[2] = 40 * MIB;
    m.trace.phase_peak[3] = 42 * MIB;
    m.trace.forward_layer[0] = 30 * MIB;
    m.trace.backward_layer[0] = 35 * MIB;
    m.trace.backward_layer_peak[0] = 48 * MIB;
    est_trace_compare c;
    est_trace_compare_rank(&m, &e, &c);
    /* Estimated peak of what a trace holds: 44 MiB at "backward layer 0". */
    ck_assert_int_eq(c.estimated_bytes, 44 * MIB);
    ck_assert_int_eq(c.unseen_bytes, 8519680);
    ck_assert_close(c.rel, 0.1, 1e-12, 0); /* (44 - 40) / 40 */
    ck_assert_int_eq(c.traced_phase, 2);
    ck_assert_int_eq(c.estimated_phase, 2);
    ck_assert(isnan(c.phase_rel[0]));                     /* no traced init peak */
    ck_assert_close(c.phase_rel[1], 41.0 / 40 - 1, 1e-12, 0); /* forward: the loss's 41 */
    ck_assert_close(c.phase_rel[2], 44.0 / 40 - 1, 1e-12, 0);
    ck_assert_close(c.phase_rel[3], 0, 1e-12, 0);          /* 42 vs 42 */
    /* Layer 0: forward 30 vs 30 (0%), backward 44 vs its peak 48 (-8.33%). */
    ck_assert_int_eq(c.boundaries, 2);
    ck_assert_close(c.boundary_worst_rel, 44.0 / 48 - 1, 1e-12, 0);
    est_estimate_free(&e);
}
END_TEST

/* `ftest check` on a file of one cpu-trace record: printed, summarised with
 * the phase agreement, and failed only when the record states a tolerance. */
static int check_text(const char *content, char **out_text, est_check_totals *tot) {
    char path[] = "/tmp/ftest-trace-XXXXXX.jsonl";
    int fd = mkstemps(path, 6);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    size_t len = 0;
    FILE *f = open_memstream(out_text, &len);
    est_check_options opt = {.quiet = false};
    memset(tot, 0, sizeof *tot);
    int rc = est_check_file(path, &cat, &opt, f, tot, err, sizeof err);
    fclose(f);
    unlink(path);
    est_gpu_catalog_free(&cat);
    return rc;
}

/* ZeRO-3's pending stream-ordered frees (DeepSpeed's free_param frees after
 * record_stream; the estimate holds a fitted resident comm term of them,
 * e->rank_spread_bytes, docs/method.md): a CPU trace has one process and no
 * streams, so a released storage goes at once and the term is no part of
 * what it can see. By hand: 8.125 MiB cuBLAS workspace, a 1.75 MiB term.
 *   moment A: params 10, comm 0.8 + 1.75, workspace 8.125  visible 10.8
 *   moment B: params 10, comm 1 (the term not yet there)   visible 10
 *     (at most the moment's comm bytes are taken) */
START_TEST(test_trace_leaves_out_pending_frees) {
    est_estimate e;
    est_estimate_init(&e);
    e.k.value[EST_K_CUBLAS_WORKSPACE_BYTES] = 8519680;
    e.rank_spread_bytes = 7 * MIB / 4;
    int64_t b[EST_CAT_COUNT];
    memset(b, 0, sizeof b);
    b[EST_CAT_PARAMS] = 10 * MIB;
    b[EST_CAT_COMM] = 4 * MIB / 5 + 7 * MIB / 4;
    b[EST_CAT_WORKSPACE] = 8519680;
    ck_assert_ptr_nonnull(est_timeline_push(&e.tl, EST_PHASE_FORWARD, 0, "forward layer 0", b));
    memset(b, 0, sizeof b);
    b[EST_CAT_PARAMS] = 10 * MIB;
    b[EST_CAT_COMM] = MIB;
    ck_assert_ptr_nonnull(est_timeline_push(&e.tl, EST_PHASE_INIT, -1, "model loaded", b));
    int64_t unseen = 0;
    ck_assert_int_eq(est_trace_visible_bytes(&e.tl.phases[0], &e, &unseen), 10 * MIB + 4 * MIB / 5);
    ck_assert_int_eq(unseen, 8519680 + 7 * MIB / 4);
    ck_assert_int_eq(est_trace_visible_bytes(&e.tl.phases[1], &e, &unseen), 10 * MIB);
    ck_assert_int_eq(unseen, MIB);
    est_estimate_free(&e);
}
END_TEST

START_TEST(test_check_prints_but_does_not_fail_traces) {
    char *text = NULL;
    est_check_totals tot;
    ck_assert_int_eq(check_text(record_line(NULL), &text, &tot), 0);
    ck_assert_uint_eq(tot.records, 1);
    ck_assert_uint_eq(tot.failed, 0);
    ck_assert_msg(strstr(text, "trace ") && strstr(text, "peak in backward"), "%s", text);
    ck_assert_msg(strstr(text, "phase right") && strstr(text, "cpu-trace deepspeed N=2"), "%s", text);
    free(text);
    /* A stated tolerance no estimate of this toy meets does fail it. */
    ck_assert_int_eq(check_text(record_line(",\"tolerance\":{\"peak_rel\":0.000001}"), &text, &tot), 0);
    ck_assert_uint_eq(tot.failed, 1);
    ck_assert_msg(strstr(text, "FAIL"), "%s", text);
    free(text);
}
END_TEST

Suite *suite_check_trace(void);
Suite *suite_check_trace(void) {
    Suite *s = suite_create("check_trace");
    TCase *tc = tcase_create("cpu-trace");
    tcase_add_test(tc, test_trace_record_is_read);
    tcase_add_test(tc, test_trace_compare_by_hand);
    tcase_add_test(tc, test_check_prints_but_does_not_fail_traces);
    tcase_add_test(tc, test_trace_leaves_out_pending_frees);
    suite_add_tcase(s, tc);
    return s;
}
