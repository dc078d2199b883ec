/* The 2025-10 stack (stack.c) against the framework sources it names, read at
 * its versions: each row of SWITCHES_2510 is a switch, the value the source
 * gives, and the file and lines that give it (written here from the source,
 * not from stack.c). Also: `ftest stacks` lists it, and PEFT's two Bone rows
 * (torch 2.9.0, transformers 4.57.1, peft 8be1a16), which need it, are met
 * within their tolerances. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "gpu.h"
#include "peft_vec.h"
#include "record.h"
#include "stack.h"
#include "test_util.h"

#define SW(field, value) #field, offsetof(est_stack, field), value
typedef struct {
    const char *name;
    size_t offset;
    bool value;
    const char *source;
} switch_row;

static const switch_row SWITCHES_2510[] = {
    {SW(per_layer_rope_cache, false), "transformers 4.57.1 modeling_qwen2.py 321: one Qwen2RotaryEmbedding in the model"},
    {SW(rope_once_per_forward, true), "modeling_llama.py 345, 392: position_embeddings = self.rotary_emb(...) once"},
    {SW(kv_cache_copies, true), "cache_utils.py 94-95, 119-120: DynamicLayer keys = torch.tensor([]), torch.cat"},
    {SW(sdpa_gqa_unmasked, true), "integrations/sdpa_attention.py 45: torch >= 2.5 and attention_mask is None"},
    {SW(loss_shifts_labels, true), "loss/loss_utils.py 59-60: labels padded (0, 1), shift_labels = labels[..., 1:]"},
    {SW(moe_experts_fused, false), "models/mixtral/modeling_mixtral.py 57-63: MixtralBlockSparseTop2MLP nn.Linear"},
    {SW(trainer_default_fused, true), "training_args.py 1292-1297: adamw_torch_fused if torch >= 2.8 (2.9.0)"},
    {SW(fsdp_upcasts_low_precision_params, true), "accelerate 1.11.0 accelerator.py 1961-1962: .to(torch.float32)"},
    {SW(fsdp2_upcasts_whole_model, true), "accelerate 1.11.0 utils/fsdp_utils.py 704-707: model.to(torch.float32)"},
    {SW(peft_adapters_in_base_dtype, false), "peft 0.17.1 mapping_func.py 36: autocast_adapter_dtype = True"},
    {SW(ds_cpu_adam_pinned_tiles, false), "DeepSpeed 0.18.1 csrc/includes/cpu_adam.h: no cudaMallocHost"},
    {SW(ds_flatten_on_device, false), "stage_1_and_2.py 359-368: param.cpu_data = param.data.cpu() first"},
    {SW(ds_buckets_at_first_grad, true), "stage_1_and_2.py 1521, 2200-2221: process_gradients -> backward_prologue"},
    {SW(ds_overflow_check_reduces, false), "stage_1_and_2.py 2193-2198: x.float(), isnan, isinf, logical_or"},
    {SW(ds_hook_gather_view, false), "partition_parameters.py 1610-1611: one parameter -> _allgather_params"},
    {SW(ds_linear_wrap_without_init, false), "engine.py: no zero3_linear_wrap (PR #8189 is July 2026)"},
    {SW(ds_host_ops, false), "ZeRO's host op counts read in 0.19.8 only (work_ds_host.c)"},
    {SW(torch_has_fully_shard, true), "torch 2.9: torch.distributed.fsdp.fully_shard (public from 2.6)"},
    {SW(fsdp2_one_rank_skips_gather, true), "torch 2.9.0 _fsdp_param_group.py 315-327, 356-380: world_size == 1"},
    {SW(sdpa_prefers_cudnn, true), "torch PR #162073 (for 2.9): cuDNN >= 9.9 first on sm90/100; wheel pins 9.10.2"},
    {SW(hf_only, false), "DeepSpeed and accelerate are part of the stack"},
};

START_TEST(test_2510_switches) {
    const est_stack *s = est_stack_find("2025-10");
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s->torch, "2.9.0");
    ck_assert_str_eq(s->transformers, "4.57.1");
    ck_assert_str_eq(s->deepspeed, "0.18.1");  /* PyPI 2025-10-23 */
    ck_assert_str_eq(s->accelerate, "1.11.0"); /* tag v1.11.0, 2025-10-20 */
    ck_assert_str_eq(s->peft, "0.17.1");       /* tag v0.17.1, 2025-08-21; 0.18.0 was an rc in October */
    for (size_t i = 0; i < sizeof SWITCHES_2510 / sizeof SWITCHES_2510[0]; i++) {
        const switch_row *r = &SWITCHES_2510[i];
        const bool got = *(const bool *)((const char *)s + r->offset);
        ck_assert_msg(got == r->value, "%s is %d; %s says %d", r->name, got, r->source, r->value);
    }
}
END_TEST

START_TEST(test_stacks_lists_2510) {
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    est_stacks_print(f);
    rewind(f);
    char line[256];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "2025-10 ", 8))
            found = strstr(line, " 2.9.0 ") && strstr(line, " 4.57.1 ") && strstr(line, " 0.18.1 ") &&
                    strstr(line, " 1.11.0 ") && strstr(line, " 0.17.1 ");
    fclose(f);
    ck_assert_int_eq(found, 1);
    ck_assert_ptr_nonnull(est_stack_find("2025-10"));
    ck_assert_str_eq(est_stack_default()->name, "2025-02"); /* the default does not move */
}
END_TEST

/* accelerate 1.11.0's FSDP2 upcast (utils/fsdp_utils.py 704-707: after
 * fully_shard, `model = model.to(torch.float32)` when mixed_precision is not
 * "no" and the model is not fp32). Llama-3.2-1B with an untied head on one
 * H200: 1,235,814,400 parameters tied (Meta's model card) plus the head's
 * 128,256 x 2,048 = 262,668,288, P = 1,498,482,688; loaded in bf16, bf16 mixed
 * precision, FSDP2 FULL_SHARD on one rank through accelerate. On 2025-10 the
 * shards are fp32: 4P of parameters and AdamW's two fp32 states 8P at the
 * first block's forward; on 2026-11 (accelerate 1.15.0, no upcast) 2P and 4P. */
#define L32_P INT64_C(1498482688)
static int64_t at_forward3(const est_estimate *e, est_category c) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (!strcmp(e->tl.phases[i].label, "forward layer 3")) return e->tl.phases[i].bytes[c];
    ck_abort_msg("no moment \"forward layer 3\"");
    return -1;
}

START_TEST(test_2510_fsdp2_upcast) {
    ck_assert_int_eq(L32_P, INT64_C(1235814400) + INT64_C(128256) * 2048);
    const char *stacks[] = {"2025-10", "2026-11"};
    const int64_t w[] = {4, 2};
    for (int i = 0; i < 2; i++) {
        est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200");
        run.stack = est_stack_find(stacks[i]);
        run.framework = EST_FW_FSDP;
        run.fsdp_version = EST_FSDP2;
        run.fsdp_wrapper = EST_FSDP_BY_ACCELERATE;
        run.zero_stage = 3;
        run.seq_len = 1024;
        run.load_dtype = EST_LOAD_BF16;
        run.fsdp_backward_prefetch = EST_FSDP_PREFETCH_NONE;
        est_estimate e;
        test_estimate(&run, &e);
        /* fp32 shards under a 16-bit compute dtype are master weights */
        ck_assert_int_eq(at_forward3(&e, w[i] == 4 ? EST_CAT_MASTER : EST_CAT_PARAMS), w[i] * L32_P);
        /* m and v, and fused AdamW's step on the device (both stacks default
         * to adamw_torch_fused; torch 2.9.0 optim/adam.py 167-175 puts state["step"] on
         * p.device when fused): one fp32 scalar for each of the 147 tensors
         * (embedding, 16 x 9 in the blocks, final norm, head), 512 bytes
         * each as the caching allocator rounds it (kMinBlockSize) */
        ck_assert_int_eq(at_forward3(&e, EST_CAT_OPTIMIZER), 2 * w[i] * L32_P + 147 * 512);
        est_estimate_free(&e);
    }
}
END_TEST

/* PEFT's two Bone rows (tuners/bone/layer.py at 8be1a16, MiSS's forward):
 * each within the tolerance the record carries (reserved 6%, after step 1%,
 * it/s 25%). */
START_TEST(test_bone_rows_met) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    FILE *f = fopen(test_repo_path("calibrate/records/peft-metamathqa-l40s.jsonl"), "r");
    ck_assert_ptr_nonnull(f);
    static char line[1 << 16];
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"peft_method\":\"bone\"")) continue;
        ck_assert_ptr_nonnull(strstr(line, "\"stack\":\"2025-10\""));
        est_record rec;
        ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(rec.not_expressible[0] == '\0', "%s", rec.not_expressible);
        ck_assert_str_eq(rec.run.stack->name, "2025-10");
        ck_assert(est_peft_vec_on(&rec.run));
        ck_assert_double_eq(rec.tol_reserved_rel, 0.06);
        test_record_within_tolerance(&rec);
        est_record_free(&rec);
        seen++;
    }
    fclose(f);
    ck_assert_int_eq(seen, 2); /* bone default and bat */
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_stacks(void);
Suite *suite_stacks(void) {
    Suite *s = suite_create("stacks");
    TCase *tc = tcase_create("stacks");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_2510_switches);
    tcase_add_test(tc, test_stacks_lists_2510);
    tcase_add_test(tc, test_bone_rows_met);
    tcase_add_test(tc, test_2510_fsdp2_upcast);
    suite_add_tcase(s, tc);
    return s;
}
