/* --torchtune: torchtune 0.6.1 recipe configs (estimator/frameworks/torchtune.c,
 * torchtune_keys.c) and CEWithChunkedOutputLoss (estimator/model/block_ends.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block.h"
#include "cli_run.h"
#include "estimate.h"
#include "hf_modeling.h"
#include "lora.h"
#include "test_util.h"
#include "torchtune.h"
#include "torchtune_keys.h"

static const char *write_yaml(const char *text) { return test_write_temp("tt", text); }

/* The recipe as torchtune/_recipe_registry.py (v0.6.1) pairs each config name. */
START_TEST(test_recipe_by_name) {
    static const struct {
        const char *path;
        int recipe; /* -1: refused */
    } CASES[] = {
        {"recipes/configs/llama3_1/8B_full.yaml", EST_TT_FULL_DISTRIBUTED},
        {"llama3_3/70B_full_multinode.yaml", EST_TT_FULL_DISTRIBUTED},
        {"8B_lora.yaml", EST_TT_LORA_DISTRIBUTED},
        {"70B_qlora.yaml", EST_TT_LORA_DISTRIBUTED},
        {"mistral/7B_full_low_memory.yaml", EST_TT_FULL_SINGLE},
        {"1B_full_single_device.yaml", EST_TT_FULL_SINGLE},
        {"8B_lora_single_device.yaml", EST_TT_LORA_SINGLE},
        {"8B_qlora_single_device.yaml", EST_TT_LORA_SINGLE},
        {"8B_full_dpo.yaml", -1},
        {"8B_qat_lora.yaml", -1},
        {"evaluation.yaml", -1},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        est_tt_recipe r;
        char err[300] = "";
        int rc = est_torchtune_recipe(CASES[i].path, NULL, &r, err, sizeof err);
        if (CASES[i].recipe < 0) {
            ck_assert_msg(rc == -1 && strstr(err, "--torchtune-recipe"), "%s: %s", CASES[i].path, err);
            continue;
        }
        ck_assert_msg(rc == 0 && (int)r == CASES[i].recipe, "%s", CASES[i].path);
    }
    est_tt_recipe r;
    char err[300];
    ck_assert_int_eq(est_torchtune_recipe("x.yaml", "lora_finetune_single_device", &r, err, sizeof err), 0);
    ck_assert_int_eq(r, EST_TT_LORA_SINGLE);
    ck_assert_int_eq(est_torchtune_recipe("8B_full.yaml", "ppo_full_finetune_single_device", &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not modelled"));
}
END_TEST

/* llama3_1/8B_lora.yaml as read by hand from the file: lora_llama3_1_8b,
 * rank 8, alpha 16, q_proj v_proj output_proj + MLP, batch 2, accumulation 8,
 * AdamW fused, CEWithChunkedOutputLoss, bf16, no checkpointing; the
 * distributed LoRA recipe shards with FSDP2, resharding after forward. */
START_TEST(test_lora_distributed) {
    char path[1024], err[300];
    snprintf(path, sizeof path, "%s", test_repo_path("tests/recipes/torchtune/llama3_1/8B_lora.yaml"));
    est_run run;
    char *argv[] = {"ftest", "--torchtune", path, "--seq", "2048", "--gpus", "8", NULL};
    ck_assert_msg(test_cli_build(7, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.model.num_layers, 32);
    ck_assert_int_eq(run.model.vocab_size, 128256);
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP2);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_NONE);
    ck_assert_int_eq(run.precision, EST_PREC_BF16);
    ck_assert_int_eq(run.micro_batch, 2);
    ck_assert_int_eq(run.grad_accum, 8);
    ck_assert_int_eq(run.seq_len, 2048);
    ck_assert_int_eq(run.gpus_per_node, 8);
    ck_assert_int_eq(run.lora.rank, 8);
    ck_assert_double_eq(run.lora.alpha, 16);
    ck_assert(run.lora.base_dtype);
    ck_assert_int_eq(run.fsdp_lora_wrap, EST_FSDP_LORA_WRAP_LAYER);
    uint32_t want;
    ck_assert_int_eq(est_lora_targets_parse("q,v,o,gate,up,down", &want, err, sizeof err), 0);
    ck_assert_uint_eq(run.lora.targets, want);
    ck_assert_int_eq(run.optimizer, EST_OPT_ADAMW);
    ck_assert_int_eq(run.adamw_impl, EST_ADAMW_FUSED);
    ck_assert_int_eq(run.loss, EST_LOSS_CHUNKED_OUTPUT);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_NONE);
    ck_assert_int_eq(run.quant, EST_QUANT_NONE);
    /* flags win */
    char *argv2[] = {"ftest", "--torchtune", path, "--seq", "1024", "--batch", "1", "--lora-rank", "64", NULL};
    ck_assert_msg(test_cli_build(9, argv2, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.micro_batch, 1);
    ck_assert_int_eq(run.seq_len, 1024);
    ck_assert_int_eq(run.lora.rank, 64);
}
END_TEST

/* llama3_1/8B_full_single_device.yaml: one GPU, PagedAdamW8bit stepped in
 * backward, full checkpointing (non-reentrant checkpoint_wrapper);
 * llama3_3/70B_qlora.yaml: FSDP2 with NF4 bases (double-quantized scalers). */
START_TEST(test_single_device_and_qlora) {
    char path[1024], err[300];
    est_run run;
    snprintf(path, sizeof path, "%s", test_repo_path("tests/recipes/torchtune/llama3_1/8B_full_single_device.yaml"));
    char *argv[] = {"ftest", "--torchtune", path, "--seq", "2048", NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_run_world(&run), 1);
    ck_assert_int_eq(run.framework, EST_FW_HF);
    ck_assert_int_eq(run.optimizer, EST_OPT_PAGED_ADAMW_8BIT);
    ck_assert(run.optimizer_in_backward);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert(run.ckpt_non_reentrant);
    ck_assert_int_eq(run.lora.rank, 0);
    snprintf(path, sizeof path, "%s", test_repo_path("tests/recipes/torchtune/llama3_3/70B_qlora.yaml"));
    char *argv2[] = {"ftest", "--torchtune", path, "--seq", "2048", "--gpus", "8", NULL};
    ck_assert_msg(test_cli_build(7, argv2, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.quant, EST_QUANT_NF4);
    ck_assert(run.double_quant);
    ck_assert_int_eq(run.model.num_layers, 80);
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
}
END_TEST

/* Every refusal is one line naming what is not modelled. */
START_TEST(test_refusals) {
    static const struct {
        const char *yaml, *needle;
    } CASES[] = {
        {"model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_sizes: 2\n", "unknown key batch_sizes"},
        {"model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n  tie_word: true\n", "model.tie_word"},
        {"tensor_parallel_dim: 2\n", "tensor_parallel_dim"},
        {"ac_mode: selective\n", "ac_mode"},
        {"profiler:\n  enabled: true\n", "profiler.enabled"},
        {"optimizer:\n  _component_: torch.optim.AdamW\n  amsgrad: true\n", "amsgrad"},
        {"loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n  num_output_chunks: 16\n",
         "num_output_chunks"},
        {"dataset:\n  - packed: true\n  - packed: false\n", "packed and unpacked"},
        {"dtype: fp16\n", "fp16"},
        {"device: cpu\n", "device cpu"},
        {"optimizer:\n  _component_: torchao.prototype.low_bit_optim.AdamW8bit\n", "torchao.prototype"},
        {"loss:\n  _component_: torch.nn.CrossEntropyLoss\n", "torch.nn.CrossEntropyLoss"},
        {"model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_rank: 8\n  lora_attn_modules: [q_proj]\n",
         "is a LoRA builder"},
        {"model:\n  _component_: torchtune.models.clip.clip_vision_encoder\n", "clip_vision_encoder"},
    };
    /* a valid base, each case's keys replacing or adding to it */
    static const char *BASE = "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n"
                              "optimizer:\n  _component_: torch.optim.AdamW\n"
                              "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n"
                              "dtype: bf16\nbatch_size: 1\n";
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char text[2048];
        /* a later duplicate of a top-level key: put the case first and drop the base's copy */
        const char *key_end = strchr(CASES[i].yaml, ':');
        char key[64];
        snprintf(key, sizeof key, "%.*s:", (int)(key_end - CASES[i].yaml), CASES[i].yaml);
        const char *dup = strstr(BASE, key);
        if (dup && (dup == BASE || dup[-1] == '\n')) {
            const char *next = dup + strlen(key);
            while (*next && !(next[0] == '\n' && next[1] != ' ')) next++;
            snprintf(text, sizeof text, "%s%.*s%s", CASES[i].yaml, (int)(dup - BASE), BASE, *next ? next + 1 : "");
        } else
            snprintf(text, sizeof text, "%s%s", CASES[i].yaml, BASE);
        const char *p = write_yaml(text);
        char path[96];
        snprintf(path, sizeof path, "%s", p);
        char link[128];
        snprintf(link, sizeof link, "%s_full_single_device.yaml", p);
        ck_assert_int_eq(rename(path, link), 0);
        char err[400] = "";
        est_run run;
        char *argv[] = {"ftest", "--torchtune", link, "--seq", "512", NULL};
        int rc = test_cli_build(5, argv, &run, err, sizeof err);
        unlink(link);
        ck_assert_msg(rc == -1, "accepted case %zu", i);
        ck_assert_msg(strstr(err, CASES[i].needle) && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
    }
}
END_TEST

/* CEWithChunkedOutputLoss, derived by hand from ce_chunked_output_loss.py and
 * TransformerDecoder.chunked_output (v0.6.1): the model returns 8 bf16 chunks
 * of b x ceil(s/8) rows, together b*s*V*2 bytes (the logits the standard loss
 * returns whole), and the largest fp32 tensor of the loss is one chunk's,
 * b*(s/8)*V*4, where the standard loss makes b*s*V*4 at once. */
START_TEST(test_chunked_output_loss) {
    est_run run = test_run_of("llama3.2-1b", "h100");
    run.precision = EST_PREC_BF16;
    run.framework = EST_FW_HF; /* one GPU, as lora_finetune_single_device */
    run.gpus_per_node = 1;
    run.micro_batch = 2;
    run.seq_len = 1024;
    const int64_t V = 128256, T = 2 * 1024;
    est_module *m = malloc(sizeof *m);
    char err[200];
    int64_t out_bytes[2] = {0, 0}, fp32_max[2] = {0, 0};
    int outputs[2] = {0, 0};
    const est_loss losses[2] = {EST_LOSS_STANDARD, EST_LOSS_CHUNKED_OUTPUT};
    for (int k = 0; k < 2; k++) {
        run.loss = losses[k];
        est_regime g = est_regime_of(&run);
        ck_assert_msg(est_module_head(&run, &g, m, err, sizeof err) == 0, "%s", err);
        for (int t = 0; t < m->n_tensors; t++) {
            const int64_t bytes = m->tensors[t].elems * m->tensors[t].elem_bytes;
            if (m->tensors[t].model_output) out_bytes[k] += bytes, outputs[k]++;
            if (m->tensors[t].elem_bytes == 4 && bytes > fp32_max[k]) fp32_max[k] = bytes;
        }
    }
    free(m);
    ck_assert_int_eq(outputs[1], 8);
    ck_assert_int_eq(out_bytes[1], T * V * 2);
    ck_assert_int_eq(fp32_max[1], T / 8 * V * 4);
    ck_assert_int_eq(fp32_max[0], T * V * 4);
    /* and the step's peak falls by at least the fp32 copy's 7/8 */
    est_estimate a, b;
    run.loss = EST_LOSS_STANDARD;
    test_estimate(&run, &a);
    run.loss = EST_LOSS_CHUNKED_OUTPUT;
    test_estimate(&run, &b);
    ck_assert_int_ge(a.peak_allocated_bytes - b.peak_allocated_bytes, T * V * 4 / 8 * 7);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* The stock configs of tests/recipes/torchtune.tsv do what the list says. */
START_TEST(test_stock_configs) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "FTEST=%s/ftest %s", test_build_dir(), test_repo_path("tests/recipes/run_torchtune.sh"));
    test_cmd_result *r = test_shell(cmd);
    ck_assert_msg(r->status == 0, "%s%s", r->out, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "15 estimate, 3 refuse, 0 unexpected"));
}
END_TEST

/* Every key of the table is named in docs/usage.md. */
/* custom_sharded_layers: ['tok_embeddings', 'output'] (llama3_1/8B_full.yaml):
 * torchtune's shard_model makes the embedding and the output projection FSDP2
 * units of their own. Llama-3.1-8B on 8 ranks, bf16 (no mixed precision: the
 * gathered dtype is the parameters' own, 2 bytes), seq 2048, batch 2, GA 1:
 *   embedding, output: 128,256 x 4,096 each; 128,256 / 8 = 16,032 rows a rank, no
 *   padding: gathered 128,256 x 4,096 x 2 = 1,050,673,152 bytes each;
 *   final norm: 4,096 x 2 = 8,192 bytes; a block 218,112,000 x 2 = 436,224,000.
 * Both peak in the loss backward.
 * Without (the root unit holds all three, gathered from the embedding's forward
 * to the end of backward): at the head's backward the root's pre-backward has
 * prefetched the last block's all-gather output:
 *   2 x 1,050,673,152 + 8,192 + 436,224,000 = 2,537,578,496 bytes gathered.
 * With: the embedding was resharded after its forward; the output's unit is
 * gathered for each chunk's backward: its all-gather output and the copy-out
 * (its unsharded weight) live together at the wait, beside the root's norm;
 * the last block is prefetched only at the last chunk's backward:
 *   2 x 1,050,673,152 + 8,192 = 2,101,354,496 bytes.
 * The wire: the output is gathered at each of its 8 calls in forward and in
 * backward (16 for the root's 1), the embedding again for its backward (+1),
 * and the output reduce-scattered 8 times (+7): 23 x 1,050,673,152 bytes more,
 * of which each rank sends 7/8. */
START_TEST(test_custom_sharded_layers) {
    char path[1024], err[300];
    snprintf(path, sizeof path, "%s", test_repo_path("tests/recipes/torchtune/llama3_1/8B_full.yaml"));
    est_run run;
    char *argv[] = {"ftest", "--torchtune", path, "--seq", "2048", "--gpus", "8", NULL};
    ck_assert_msg(test_cli_build(7, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.fsdp_shard_ends);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_int_eq(run.micro_batch, 2);
    ck_assert_int_eq(run.grad_accum, 1);
    est_estimate with, without;
    test_estimate(&run, &with);
    run.fsdp_shard_ends = false;
    test_estimate(&run, &without);
    const int64_t V_h = 1050673152, norm = 8192, block = 436224000;
    ck_assert_int_eq(128256LL * 4096 * 2, V_h);
    ck_assert_str_eq(with.tl.phases[with.peak_index].label, "loss backward");
    ck_assert_str_eq(without.tl.phases[without.peak_index].label, "loss backward");
    ck_assert_int_eq(without.breakdown[EST_CAT_COMM], 2 * V_h + norm + block);
    ck_assert_int_eq(with.breakdown[EST_CAT_COMM], 2 * V_h + norm);
    ck_assert_close(with.time.comm_bytes - without.time.comm_bytes, 23.0 * (double)V_h * 7.0 / 8.0, 0, 1e-9);
    est_estimate_free(&with);
    est_estimate_free(&without);
    /* a tied head reads the embedding unit's weight: refused */
    est_run tied = test_run_of("llama3.2-1b", "h100");
    tied.framework = EST_FW_FSDP;
    tied.fsdp_version = EST_FSDP2;
    tied.zero_stage = 3;
    tied.gpus_per_node = 8;
    tied.fsdp_shard_ends = true;
    est_estimate t;
    est_estimate_init(&t);
    ck_assert_int_eq(est_estimate_run(&tied, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tied embeddings") && !strchr(err, '\n'), "%s", err);
    est_estimate_free(&t);
    /* one end without the other, or another module: refused on the distributed recipe */
    static const char *const LISTS[] = {"['tok_embeddings']", "['output']", "['norm', 'output', 'tok_embeddings']"};
    for (size_t i = 0; i < sizeof LISTS / sizeof LISTS[0]; i++) {
        char text[512], link[128];
        snprintf(text, sizeof text, "custom_sharded_layers: %s\nmodel:\n  _component_: "
                 "torchtune.models.llama3_2.llama3_2_1b\noptimizer:\n  _component_: torch.optim.AdamW\n"
                 "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\ndtype: bf16\n", LISTS[i]);
        const char *p = write_yaml(text);
        snprintf(link, sizeof link, "%s_full.yaml", p);
        ck_assert_int_eq(rename(p, link), 0);
        char *argv2[] = {"ftest", "--torchtune", link, "--seq", "512", "--gpus", "8", NULL};
        const int rc = test_cli_build(7, argv2, &run, err, sizeof err);
        unlink(link);
        ck_assert_msg(rc == -1 && strstr(err, "custom_sharded_layers") && !strchr(err, '\n'), "%s: %s", LISTS[i], err);
    }
}
END_TEST

/* dataset.packed (v0.6.1 datasets/_packed.py, modules/attention_utils.py):
 * every row is one pack padded to tokenizer.max_seq_len, attended through
 * flex_attention with a block-causal BlockMask. Llama-3.2-1B, batch 1, rows of
 * 4096. Memory: flex_attention saves what SDPA's flash kernel saves (q, k, v,
 * the output and the fp32 logsumexp) and the BlockMask's int32 block tables
 * (b x 32 x 32 entries at 128-token blocks) are not counted: the peak is the
 * unpacked run's. Time: samples of 512 tokens (8 a row) attend within
 * themselves: the attention term of the model FLOPs (6 L s q per token,
 * L = 16, q = 32 x 64 = 2048) takes 512 for s: per rank and step
 *   4096 x 6 x 16 x (4096 - 512) x 2048 FLOPs fewer. */
START_TEST(test_packed) {
    const char *text = "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  packed: True\n"
                       "tokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n  max_seq_len: 4096\n"
                       "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n"
                       "optimizer:\n  _component_: torch.optim.AdamW\n"
                       "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n"
                       "dtype: bf16\nbatch_size: 1\n";
    char link[128], err[400] = "";
    const char *p = write_yaml(text);
    snprintf(link, sizeof link, "%s_full_single_device.yaml", p);
    ck_assert_int_eq(rename(p, link), 0);
    est_run run;
    char *argv[] = {"ftest", "--torchtune", link, NULL};
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.packed && run.packed_flex);
    ck_assert_int_eq(run.seq_len, 4096);
    ck_assert_int_eq(run.attention, EST_ATTN_SDPA);
    est_estimate packed, unpacked, short_samples;
    test_estimate(&run, &packed);
    run.packed_sample_len = 512;
    test_estimate(&run, &short_samples);
    run.packed = run.packed_flex = false;
    run.packed_sample_len = 0;
    test_estimate(&run, &unpacked);
    ck_assert_int_eq(packed.peak_allocated_bytes, unpacked.peak_allocated_bytes);
    ck_assert_int_eq(short_samples.peak_allocated_bytes, unpacked.peak_allocated_bytes);
    ck_assert_close(unpacked.time.model_flops - short_samples.time.model_flops,
                    4096.0 * 6 * 16 * (4096 - 512) * 2048, 0, 1e-9);
    ck_assert(short_samples.step_time_s < packed.step_time_s);
    est_estimate_free(&packed);
    est_estimate_free(&unpacked);
    est_estimate_free(&short_samples);
    /* without tokenizer.max_seq_len PackedDataset raises (datasets/_alpaca.py) */
    p = write_yaml("dataset:\n  packed: True\nmodel:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n"
                   "optimizer:\n  _component_: torch.optim.AdamW\n"
                   "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n");
    unlink(link);
    snprintf(link, sizeof link, "%s_full_single_device.yaml", p);
    ck_assert_int_eq(rename(p, link), 0);
    ck_assert_int_eq(test_cli_build(3, argv, &run, err, sizeof err), -1);
    unlink(link);
    ck_assert_msg(strstr(err, "PackedDataset") && !strchr(err, '\n'), "%s", err);
}
END_TEST

START_TEST(test_keys_documented) {
    char *doc = test_slurp(test_repo_path("docs/usage.md"), NULL);
    ck_assert_ptr_nonnull(doc);
    const char *sec, *kind, *why, *key;
    for (size_t i = 0; (key = est_torchtune_key_at(i, &sec, &kind, &why)); i++) {
        char name[96];
        snprintf(name, sizeof name, "`%s%s%s`", sec, sec[0] ? "." : "", key);
        ck_assert_msg(strstr(doc, name), "docs/usage.md does not name %s", name);
    }
    free(doc);
}
END_TEST

Suite *suite_torchtune(void);
Suite *suite_torchtune(void) {
    Suite *s = suite_create("torchtune");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_recipe_by_name);
    tcase_add_test(tc, test_lora_distributed);
    tcase_add_test(tc, test_single_device_and_qlora);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_chunked_output_loss);
    tcase_add_test(tc, test_stock_configs);
    tcase_add_test(tc, test_keys_documented);
    tcase_add_test(tc, test_custom_sharded_layers);
    tcase_add_test(tc, test_packed);
    suite_add_tcase(s, tc);
    return s;
}
