/* Partial training (--trainable, axolotl's unfrozen_parameters;
 * estimator/model/trainable.c, frameworks/autograd.c, seam_deepspeed*.c,
 * axolotl_unfrozen.c) against figures derived here by hand.
 *
 * The model is tiny-llama (models/tiny-llama.json: h 32, f 64, 4 heads and
 * 2 KV heads of 8, V 64, 2 layers, untied head; 22,688 parameters counted by
 * hand in docs/trainer.md). Only layer 1's MLP trains in most cases:
 * gate_proj (64, 32), up_proj (64, 32), down_proj (32, 64) = 3 x 2048 = 6144
 * elements. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block.h"
#include "estimate.h"
#include "options.h"
#include "step_build.h"
#include "lora.h"
#include "trainable.h"
#include "test_util.h"

static const int64_t E_MLP = 3 * 64 * 32; /* layer 1's gate, up and down weights */
static const int64_t P_ALL = 22688;

Suite *suite_trainable(void);

static est_run tiny(const char *patterns) {
    est_run r = test_run_of("tiny-llama", "h100");
    r.framework = EST_FW_HF;
    r.gpus_per_node = 1;
    r.micro_batch = 1;
    r.seq_len = 128;
    memset(&r.trainable, 0, sizeof r.trainable);
    const char *p = patterns;
    while (p && *p) {
        const char *c = strchr(p, ',');
        const size_t n = c ? (size_t)(c - p) : strlen(p);
        memcpy(r.trainable.pattern[r.trainable.n], p, n);
        r.trainable.pattern[r.trainable.n++][n] = '\0';
        p = c ? c + 1 : NULL;
    }
    return r;
}

/* named_parameters() as transformers 4.x and PEFT spell them. */
START_TEST(test_hf_names) {
    est_run r = tiny(NULL);
    const est_regime g = {.act = 2, .resid = 2, .weight = 2, .adapter = 4, .train_base = true};
    est_module *m = malloc(sizeof *m);
    char err[256], name[192];
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    ck_assert_int_eq(est_param_hf_name(&r, m, 0, 1, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "model.layers.1.self_attn.q_proj.weight");
    r.lora.rank = 8;
    r.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    ck_assert_int_eq(est_param_hf_name(&r, m, 0, 0, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight");
    ck_assert_int_eq(est_param_hf_name(&r, m, 1, 0, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight");
    ck_assert_int_eq(est_param_hf_name(&r, m, 3, 0, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "base_model.model.model.layers.0.self_attn.k_proj.weight"); /* not targeted */
    /* Mixtral's experts: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down). */
    est_run x = test_run_of("mixtral-8x7b", "h100");
    x.seq_len = 16;
    ck_assert_int_eq(est_module_block(&x, &g, false, m, err, sizeof err), 0);
    bool w1 = false, w2 = false, gate = false;
    for (int p = 0; p < m->n_params; p++) {
        ck_assert_int_eq(est_param_hf_name(&x, m, p, 44, 5, name, sizeof name), 0);
        w1 |= !strcmp(name, "model.layers.44.block_sparse_moe.experts.5.w1.weight");
        w2 |= !strcmp(name, "model.layers.44.block_sparse_moe.experts.5.w2.weight");
        gate |= !strcmp(name, "model.layers.44.block_sparse_moe.gate.weight");
    }
    ck_assert(w1 && w2 && gate);
    free(m);
}
END_TEST

/* Counting: layer 1's MLP is 6144 of the 22,688 parameters; the LM head
 * (V x h = 2048) adds its own. */
START_TEST(test_count) {
    char err[256];
    int64_t t = 0, all = 0;
    est_run r = tiny("layers\\.1\\.mlp\\.");
    ck_assert_msg(est_trainable_count(&r, &t, &all, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t, E_MLP);
    ck_assert_int_eq(all, P_ALL);
    r = tiny("layers\\.1\\.mlp\\.,^lm_head");
    ck_assert_msg(est_trainable_count(&r, &t, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t, E_MLP + 64 * 32);
}
END_TEST

static int mask_of(const est_module *m, const char *const *names, int n) {
    int mask = 0;
    for (int p = 0; p < m->n_params; p++)
        for (int i = 0; i < n; i++)
            if (!strcmp(m->params[p].name, names[i])) mask |= 1 << p;
    return mask;
}

/* Layer 1 with only its MLP trainable, its input needing no gradient (layer
 * 0 and the embedding frozen), bf16 throughout (no autocast), T = 128:
 *  - attention and both norms: nothing requires grad, nothing is saved;
 *  - gate_proj and up_proj: W trains, so each keeps its input, the MLP norm's
 *    output, one tensor (T x h x 2 = 8192 bytes);
 *  - act(gate) keeps its input, gate's output (T x f x 2 = 16384);
 *  - act(gate) * up keeps both factors (2 x 16384);
 *  - down_proj keeps its input (16384);
 * in all 8192 + 4 x 16384 = 73,728 bytes. With every parameter frozen and
 * the input needing no gradient the block saves nothing and its output needs
 * no gradient; with the input needing one (the data gradient only), no
 * Linear keeps its input (grad_x = grad @ W needs W alone). */
START_TEST(test_saved_by_hand) {
    est_run r = tiny(NULL);
    static const char *const MLP[] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    est_regime g = {.act = 2, .resid = 2, .weight = 2, .adapter = 4, .train_base = true};
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    g.masked = true;
    g.train_mask = (uint64_t)mask_of(m, MLP, 3);
    g.in_grad = false;
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    ck_assert_int_eq(est_module_trainable_elems(m), E_MLP);
    ck_assert_int_eq(est_module_saved_bytes(m), 8192 + 4 * 16384);
    g.train_mask = 0;
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    ck_assert_int_eq(est_module_saved_bytes(m), 0);
    ck_assert(!m->tensors[m->output].requires_grad);
    g.in_grad = true;
    ck_assert_int_eq(est_module_block(&r, &g, false, m, err, sizeof err), 0);
    ck_assert(m->tensors[m->output].requires_grad);
    for (int j = 0; j < m->n_ops; j++)
        if (m->ops[j].kind == EST_OP_LINEAR) ck_assert_msg(!m->ops[j].saves[0], "%s keeps its input", m->ops[j].name);
    free(m);
}
END_TEST

/* The HF Trainer (bf16-mixed: fp32 weights under autocast): AdamW keeps
 * exp_avg and exp_avg_sq in fp32 for the trained weights only,
 * 2 x 4 x 6144 = 49,152 bytes (8 x 22,688 when everything trains). */
START_TEST(test_hf_optimizer_state) {
    est_run r = tiny("layers\\.1\\.mlp\\.");
    r.precision = EST_PREC_BF16_MIXED;
    est_estimate e;
    test_estimate(&r, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 8 * E_MLP);
    est_run full = tiny(NULL);
    full.precision = EST_PREC_BF16_MIXED;
    est_estimate f;
    test_estimate(&full, &f);
    ck_assert_int_eq(f.category_peak[EST_CAT_OPTIMIZER], 8 * P_ALL);
    ck_assert_int_lt(e.category_peak[EST_CAT_ACTIVATIONS], f.category_peak[EST_CAT_ACTIVATIONS]);
    est_estimate_free(&e);
    est_estimate_free(&f);
}
END_TEST

/* DeepSpeed ZeRO-3 on one rank, bf16: only trainable parameters enter the
 * optimizer's groups (stage3.py _get_trainable_parameter_groups, 0.16.5):
 * the fp32 master is made from a bf16 clone of the 6144-element group (2 +
 * 4 bytes each at once: 36,864), Adam's m and v are 8 x 6144 = 49,152, the
 * gradient partition 2 x 6144 = 12,288; the bf16 weights stay all 22,688. */
START_TEST(test_zero3_groups) {
    est_run r = tiny("layers\\.1\\.mlp\\.");
    r.framework = EST_FW_DEEPSPEED;
    r.zero_stage = 3;
    r.precision = EST_PREC_BF16_MIXED;
    est_estimate e;
    test_estimate(&r, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_MASTER], 6 * E_MLP);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 8 * E_MLP);
    const est_phase *init = test_row(&e, "engine initialized");
    ck_assert_int_eq(init->bytes[EST_CAT_MASTER], 4 * E_MLP);
    ck_assert_int_ge(init->bytes[EST_CAT_PARAMS], 2 * P_ALL);
    ck_assert_int_eq(init->bytes[EST_CAT_GRADS], 2 * E_MLP);
    est_estimate_free(&e);
}
END_TEST

static void refused(const char *patterns, est_framework fw, int stage, const char *words) {
    est_run r = tiny(patterns);
    r.framework = fw;
    r.zero_stage = stage;
    char err[300] = "";
    ck_assert_int_eq(est_run_validate(&r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, words) && !strchr(err, '\n'), "no \"%s\" in: %s", words, err);
}

/* Layer 0 of tiny-llama with only layer 1's MLP trained: nothing in or
 * before it needs a gradient, so autograd never runs its backward and its
 * backward row takes no time (layer 1's does). */
START_TEST(test_no_backward_no_time) {
    est_run r = tiny("layers\\.1\\.mlp\\.");
    est_estimate e;
    test_estimate(&r, &e);
    ck_assert(test_row(&e, "backward layer 0")->time_s == 0);
    ck_assert(test_row(&e, "backward layer 1")->time_s > 0);
    ck_assert(test_row(&e, "forward layer 0")->time_s > 0);
    est_estimate_free(&e);
}
END_TEST

/* GEMM FLOPs the time ledger books on one block unit of the step. */
static double unit_flops(const est_estimate *e, est_unit unit, int32_t layer) {
    for (size_t u = 0; u < e->step.unit_count; u++) {
        const est_unit_ref *ref = &e->step.units[u];
        if (ref->unit != unit || ref->layer != layer) continue;
        double flops = 0;
        for (size_t i = ref->body; i < ref->body + ref->body_len; i++)
            if (e->step.work[i].kind == EST_EV_GEMM)
                flops += 2 * e->step.work[i].u.gemm.M * e->step.work[i].u.gemm.K * e->step.work[i].u.gemm.N *
                         e->step.work[i].u.gemm.count;
        return flops;
    }
    ck_abort_msg("no unit %d for layer %d", (int)unit, (int)layer);
    return 0;
}

/* Only layer 0's MLP trains (tiny-llama: h 32, MLP 64, q 32, k and v 16;
 * SDPA, 128 tokens). Layer 1 is frozen but runs its backward, the gradient
 * going on to layer 0: each of its Linears computes its input gradient and
 * no weight gradient, 2 T x (32x32 + 2 x 32x16 + 32x32 + 3 x 32x64) = 2 T x
 * 9216. Layer 0's input needs no gradient and its attention trains nothing:
 * only gate, up and down compute weight gradients (2 T x 2048 each), and
 * down its input gradient (gate's and up's outputs require grad), 2 T x
 * 2048: 8 T x 2048 in all. */
START_TEST(test_frozen_backward_time) {
    est_run r = tiny("layers\\.0\\.mlp\\.");
    r.attention = EST_ATTN_SDPA;
    r.checkpointing = EST_CKPT_NONE;
    est_estimate e;
    test_estimate(&r, &e);
    const double T = 128;
    ck_assert_double_eq_tol(unit_flops(&e, EST_UNIT_BLOCK_BWD, 1), 2 * T * 9216, 1);
    ck_assert_double_eq_tol(unit_flops(&e, EST_UNIT_BLOCK_BWD, 0), 8 * T * 2048, 1);
    est_estimate_free(&e);
}
END_TEST

/* The command line: a comma list (a comma inside {} is the regex's), flags
 * adding up, and the HF Trainer when no framework is asked for. */
START_TEST(test_cli_flag) {
    char err[300];
    est_run r;
    char *argv[] = {"ftest", "--model", "tiny-llama", "--gpus", "1", "--trainable", "layers\\.[0-9]{1,2}\\.mlp,^lm_head",
                    "--trainable", "norm", NULL};
    ck_assert_msg(test_cli_build(9, argv, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.trainable.n, 3);
    ck_assert_str_eq(r.trainable.pattern[0], "layers\\.[0-9]{1,2}\\.mlp");
    ck_assert_str_eq(r.trainable.pattern[2], "norm");
    ck_assert_int_eq(r.framework, EST_FW_HF);
    char *bad[] = {"ftest", "--model", "tiny-llama", "--trainable", "mlp,,norm", NULL};
    est_cli *cli = malloc(sizeof *cli);
    ck_assert_int_eq(est_cli_parse(5, bad, cli, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "empty pattern") && !strchr(err, '\n'), "%s", err);
    free(cli);
}
END_TEST

/* One line for each pattern ftest cannot apply. */
START_TEST(test_refusals) {
    refused("layers\\.[", EST_FW_HF, 0, "not a regular expression");
    refused("layers\\.\\d", EST_FW_HF, 0, "POSIX");
    refused("(?i)mlp", EST_FW_HF, 0, "POSIX");
    /* glibc's regcomp copies a subexpression per repetition: stacked
     * operators and large bounds would take gigabytes (found by fuzz_axolotl) */
    refused("layers\\.1\\.++++++++mlp", EST_FW_HF, 0, "stacks one repetition operator on another");
    refused("x{40}(y{30})", EST_FW_HF, 0, "more than 1000");
    refused("mlp,vision_tower", EST_FW_HF, 0, "\"vision_tower\" matches no parameter");
    refused("mlp", EST_FW_DEEPSPEED, 2, "below ZeRO-3");
    refused("mlp", EST_FW_FSDP, 3, "not for --framework fsdp");
    est_run r = tiny("vision_tower"); /* axolotl skips it: nothing trains, nothing needs a gradient */
    r.trainable.lenient = true;
    char err[300];
    ck_assert_int_eq(est_run_validate(&r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "nothing that trains"), "%s", err);
}
END_TEST

/* Reentrant checkpointing gives a layer whose input needs no gradient none
 * (torch CheckpointFunction); the non-reentrant one does. */
START_TEST(test_reentrant) {
    est_run r = tiny("layers\\.1\\.mlp\\.");
    r.checkpointing = EST_CKPT_FULL;
    char err[300];
    ck_assert_int_eq(est_run_validate(&r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--non-reentrant"), "%s", err);
    r.ckpt_non_reentrant = true;
    ck_assert_msg(est_run_validate(&r, err, sizeof err) == 0, "%s", err);
    est_estimate e;
    test_estimate(&r, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 8 * E_MLP);
    est_estimate_free(&e);
}
END_TEST

/* The bytes of the step's gradient collectives (STEP_COMM events). */
static double step_comm_bytes(const est_run *r) {
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    char err[256];
    ck_assert_msg(est_step_build(r, &k, &st, err, sizeof err) == 0, "%s", err);
    double bytes = 0;
    for (size_t i = 0; i < st.work_count; i++) /* the units' bodies */
        if (st.work[i].kind == EST_EV_STEP_COMM) bytes += st.work[i].u.comm.bytes;
    est_step_free(&st);
    return bytes;
}

/* DDP on 2 GPUs reduces the trained parameters' gradients only: a ring
 * all-reduce sends 2 (W-1)/W of them per rank, fp32 under autocast:
 * 2 x 1/2 x 6144 x 4 = 24,576 bytes (22,688 x 4 = 90,752 when all train).
 * With nothing trained, accelerate does not wrap the model in DDP
 * (accelerator.py prepare_model: any(p.requires_grad ...)): no collective. */
START_TEST(test_ddp_reduces_trained_only) {
    est_run r = tiny("layers\\.1\\.mlp\\.");
    r.precision = EST_PREC_BF16_MIXED;
    r.gpus_per_node = 2;
    ck_assert_double_eq_tol(step_comm_bytes(&r), 24576, 0.5);
    est_run full = tiny(NULL);
    full.precision = EST_PREC_BF16_MIXED;
    full.gpus_per_node = 2;
    ck_assert_double_eq_tol(step_comm_bytes(&full), 90752, 0.5);
    r = tiny("vision_tower");
    r.trainable.lenient = r.trainable.input_grads = true;
    r.precision = EST_PREC_BF16_MIXED;
    r.gpus_per_node = 2;
    ck_assert_double_eq_tol(step_comm_bytes(&r), 0, 0.5);
}
END_TEST

static const char *yaml_file(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/ftest-trainable-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static int axolotl(const char *yaml, const char *extra, est_run *run, char *err, size_t errlen) {
    setenv("HF_HUB_CACHE", test_repo_path("tests/fixtures/hf_cache"), 1);
    const char *p = yaml_file(yaml);
    char *argv[12] = {"ftest", "--axolotl", (char *)p, "--gpus", "8"};
    int argc = 5;
    char buf[128] = "";
    if (extra) { /* space-separated flags */
        snprintf(buf, sizeof buf, "%s", extra);
        for (char *t = strtok(buf, " "); t && argc < 11; t = strtok(NULL, " ")) argv[argc++] = t;
    }
    int rc = test_cli_build(argc, argv, run, err, errlen);
    unlink(p);
    return rc;
}

/* axolotl 0.18.0 freeze.py: dots are literal unless followed by '+'
 * (re.sub(r"\.(?!\+)", "\\.", ...)), names match from their start
 * (re.match), a trailing [start:end] range is dropped (the whole tensor
 * still requires grad), and naming lm_head or embed_tokens makes train.py
 * call enable_input_require_grads. bigstral-ds-zero3.yaml's patterns on
 * Mixtral-8x22B (h 6144, V 32000, untied, 56 layers, 8 experts of f 16384):
 *   embed_tokens + lm_head:                    2 x 32000 x 6144 =    393,216,000
 *   layers 44-55 (4[4-9]+ and 5[0-5]+): router 8 x 6144 = 49,152 and experts
 *   8 x 3 x 6144 x 16384 = 2,415,919,104, x 12 layers       = 28,991,619,072
 * in all 29,384,835,072. */
START_TEST(test_axolotl_unfrozen) {
    char err[300];
    est_run run;
    static const char BIGSTRAL[] =
        "base_model: mistral-community/Mixtral-8x22B-v0.1\nsequence_len: 2048\n"
        "gradient_checkpointing: true\nbf16: auto\nattn_implementation: flash_attention_2\n"
        "unfrozen_parameters:\n  - ^lm_head.weight$\n  - ^model.embed_tokens.weight$[:32000]\n"
        "  - model.layers.4[4-9]+.block_sparse_moe.gate\n  - model.layers.4[4-9]+.block_sparse_moe.experts\n"
        "  - model.layers.5[0-5]+.block_sparse_moe.gate\n  - model.layers.5[0-5]+.block_sparse_moe.experts\n";
    ck_assert_msg(axolotl(BIGSTRAL, "--framework deepspeed --zero 3", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.trainable.n, 6);
    ck_assert_str_eq(run.trainable.pattern[1], "^(^model\\.embed_tokens\\.weight$)");
    ck_assert_str_eq(run.trainable.pattern[2], "^(model\\.layers\\.4[4-9]+\\.block_sparse_moe\\.gate)");
    ck_assert(run.trainable.input_grads && run.trainable.lenient);
    ck_assert(run.ckpt_non_reentrant); /* axolotl passes use_reentrant False */
    int64_t t = 0;
    ck_assert_msg(est_trainable_count(&run, &t, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t, INT64_C(29384835072));
    /* use_reentrant: true beside unfrozen_parameters: axolotl's validation refuses it */
    ck_assert_int_eq(axolotl("base_model: mistral-community/Mixtral-8x22B-v0.1\nunfrozen_parameters: [lm_head]\n"
                             "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n",
                             NULL, &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "use_reentrant") && !strchr(err, '\n'), "%s", err);
}
END_TEST

/* gemma-3-1b-qlora.yml: its patterns (^model.language_model.*, ^lm_head.*)
 * are matched against the PEFT model's names (base_model.model.model.
 * layers...), because axolotl applies them after load_adapter: none
 * matches, so freeze_layers_except freezes every parameter, the adapters
 * too. The step then keeps no gradient and no optimizer state; the
 * embedding's output still requires grad (PEFT under checkpointing), so
 * backward runs for the activations' gradients alone. */
START_TEST(test_axolotl_gemma3_freezes_all) {
    char err[300];
    est_run run;
    static const char GEMMA3[] =
        "base_model: google/gemma-3-1b-it\nload_in_4bit: true\nadapter: qlora\nlora_r: 32\nlora_alpha: 16\n"
        "lora_target_linear: true\nsequence_len: 2048\nmicro_batch_size: 1\noptimizer: adamw_bnb_8bit\n"
        "bf16: auto\ngradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n"
        "unfrozen_parameters:\n  - ^model.language_model.*\n  - ^lm_head.*\n";
    ck_assert_msg(axolotl(GEMMA3, NULL, &run, err, sizeof err) == 0, "%s", err);
    int64_t t = -1;
    ck_assert_msg(est_trainable_count(&run, &t, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t, 0);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 0);
    ck_assert_int_eq(e.category_peak[EST_CAT_GRADS], 0);
    ck_assert_int_gt(e.category_peak[EST_CAT_ACTIVATIONS], 0);
    est_estimate_free(&e);
}
END_TEST

/* offload_param without offload_optimizer at stage 3 (the bigstral recipe's
 * deepspeed_configs/zero3_bf16_cpuoffload_params.json). stage3.py (0.16.5)
 * flattens the compute-dtype partitions into pinned host memory and makes
 * the fp32 master on the device: fp16_partitioned_groups_flat[i].to(device)
 * .clone().float(). tiny-llama on one rank, everything trained (P = 22,688),
 * one optimizer sub-group (sub_group_size absent: 1e9):
 *  - bf16: against the same run without offload, the device holds the
 *    2P-byte partition less once the engine is initialized and the host 2P
 *    more; the fp32 master (4P) and the gradient partition (2P) stay on the
 *    device; the master's peak is still the clone and its cast, 2P + 4P;
 *  - fp32 (no bf16 section): .float() returns the clone itself, and the
 *    device copy of the host partition (4P) lives beside the clone (4P):
 *    8P, where without offload the clone alone is 4P. */
static est_run ds_run(const char *json, char *err, size_t errlen) {
    const char *cfg = yaml_file(json);
    char path[64];
    snprintf(path, sizeof path, "%s", cfg);
    char *argv[] = {"ftest", "--model", "tiny-llama", "--gpus", "1", "--seq", "128", "--deepspeed-config", path, NULL};
    est_run run;
    ck_assert_msg(test_cli_build(9, argv, &run, err, errlen) == 0, "%s", err);
    unlink(path);
    return run;
}

START_TEST(test_zero3_offload_param_only) {
    char err[300];
    est_run off = ds_run("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}},"
                         " \"bf16\": {\"enabled\": true}}", err, sizeof err);
    ck_assert(off.ds.offload_param_only);
    ck_assert_int_eq(off.offload, EST_OFFLOAD_NONE);
    est_run on = off;
    on.ds.offload_param_only = false;
    est_estimate a, b;
    test_estimate(&off, &a);
    test_estimate(&on, &b);
    const est_phase *ia = test_row(&a, "engine initialized"), *ib = test_row(&b, "engine initialized");
    ck_assert_int_eq(ib->bytes[EST_CAT_PARAMS] - ia->bytes[EST_CAT_PARAMS], 2 * P_ALL);
    ck_assert_int_eq(ia->bytes[EST_CAT_MASTER], 4 * P_ALL);
    ck_assert_int_eq(ia->bytes[EST_CAT_GRADS], 2 * P_ALL);
    ck_assert_int_eq(a.cpu_bytes - b.cpu_bytes, 2 * P_ALL);
    ck_assert_int_eq(a.category_peak[EST_CAT_MASTER], 6 * P_ALL);
    off = ds_run("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}}}", err,
                 sizeof err);
    off.precision = EST_PREC_FP32; /* the engine without a bf16 or fp16 section */
    on = off;
    on.ds.offload_param_only = false;
    est_estimate_free(&a);
    est_estimate_free(&b);
    test_estimate(&off, &a);
    test_estimate(&on, &b);
    ck_assert_int_eq(a.category_peak[EST_CAT_MASTER], 8 * P_ALL);
    ck_assert_int_eq(b.category_peak[EST_CAT_MASTER], 4 * P_ALL);
    /* below stage 3 DeepSpeed has no parameter offload */
    const char *cfg = yaml_file("{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}");
    char path[64];
    snprintf(path, sizeof path, "%s", cfg);
    char *argv[] = {"ftest", "--model", "tiny-llama", "--gpus", "1", "--deepspeed-config", path, NULL};
    est_run r;
    ck_assert_int_eq(test_cli_build(7, argv, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "stage 3"), "%s", err);
    unlink(path);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* bitsandbytes' AdamW8bit as DeepSpeed's client optimizer (the bigstral
 * recipe's optimizer: adamw_bnb_8bit, zero_allow_untested_optimizer): ZeRO-3
 * steps it on each fp32 sub-group partition as one tensor (stage3.py
 * _optimizer_step, 0.16.5), so its state is made per partition as bnb's
 * Optimizer2State.init_state makes it for a tensor of n >= 4096 elements:
 * uint8 state1 and state2 (n bytes each) and an fp32 absmax per block of
 * 256 elements (bitsandbytes >= 0.44's blockwise state). tiny-llama, one
 * rank, one sub-group of P = 22,688: 2 x 22,688 + 2 x 4 x ceil(22,688 / 256)
 * = 45,376 + 712 = 46,088 bytes
 * (AdamW: 8 x 22,688 = 181,504). Under optimizer offload it is refused. */
START_TEST(test_zero3_adamw_8bit) {
    est_run r = tiny(NULL);
    r.framework = EST_FW_DEEPSPEED;
    r.zero_stage = 3;
    r.precision = EST_PREC_BF16_MIXED;
    r.optimizer = EST_OPT_ADAMW_8BIT;
    est_estimate e;
    test_estimate(&r, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 46088);
    r.optimizer = EST_OPT_ADAMW;
    est_estimate_free(&e);
    test_estimate(&r, &e);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 8 * P_ALL);
    r.optimizer = EST_OPT_ADAMW_8BIT;
    r.offload = EST_OFFLOAD_OPTIMIZER;
    char err[300];
    ck_assert_int_eq(est_run_validate(&r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "adamw-8bit without offload"), "%s", err);
    est_estimate_free(&e);
}
END_TEST

Suite *suite_trainable(void) {
    Suite *s = suite_create("trainable");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hf_names);
    tcase_add_test(tc, test_count);
    tcase_add_test(tc, test_saved_by_hand);
    tcase_add_test(tc, test_frozen_backward_time);
    tcase_add_test(tc, test_hf_optimizer_state);
    tcase_add_test(tc, test_zero3_groups);
    tcase_add_test(tc, test_no_backward_no_time);
    tcase_add_test(tc, test_cli_flag);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_reentrant);
    tcase_add_test(tc, test_ddp_reduces_trained_only);
    tcase_add_test(tc, test_axolotl_unfrozen);
    tcase_add_test(tc, test_axolotl_gemma3_freezes_all);
    tcase_add_test(tc, test_zero3_offload_param_only);
    tcase_add_test(tc, test_zero3_adamw_8bit);
    suite_add_tcase(s, tc);
    return s;
}
