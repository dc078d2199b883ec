/* Gemma, Phi-3, Llama 2, Mixtral and Qwen2-MoE from their Hugging Face
 * config.json: parameter counts derived by hand here and checked against the
 * published totals (models/<name>.json ftest.params_source), the MoE block's
 * saved tensors against transformers 4.40's forward (docs/method.md,
 * "Architectures beyond Llama"), and the refusals. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "cli.h"
#include "hf_modeling.h"
#include "lora.h"
#include "params.h"
#include "run.h"
#include "step_build.h"
#include "test_util.h"

static ft_model load(const char *name) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(name, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static est_params count(const ft_model *m) {
    est_params p;
    est_count_params(m, m->num_layers, &p);
    return p;
}

/* Dense models, per block: q, k, v, o + three MLP matrices + two norms.
 *   Gemma-7B (h 3072, 16 heads x 256 = 4096, I 24576, 28 layers, V 256000,
 *   tied): 4 x 3072 x 4096 + 3 x 3072 x 24576 + 6144 = 276,830,208; x28 +
 *   3072 + 786,432,000 = 8,537,680,896. Gemma-2B (h 2048, 8 x 256 = 2048
 *   queries, one KV head of 256, I 16384, 18 layers): 2 x 2048 x 2048 +
 *   2 x 2048 x 256 + 3 x 2048 x 16384 + 4096 = 110,104,576; x18 + 2048 +
 *   524,288,000 = 2,506,172,416.
 *   Phi-3-mini (h 3072, fused qkv 3072 x 9216, I 8192, 32 layers, V 32064,
 *   untied): 28,311,552 + 9,437,184 + 50,331,648 + 25,165,824 + 6144 =
 *   113,252,352; x32 + 3072 + 2 x 98,500,608 = 3,821,079,552.
 *   Llama-2-7B (h 4096, MHA, I 11008, V 32000): 202,383,360 x 32 + 4096 +
 *   262,144,000 = 6,738,415,616; 13B (h 5120, I 13824, 40 layers):
 *   317,204,480 x 40 + 5120 + 327,680,000 = 13,015,864,320; 70B (h 8192, 8 KV
 *   heads, I 28672, 80 layers): 2 x 67,108,864 + 2 x 8,388,608 + 3 x 8192 x
 *   28672 + 16384 = 855,654,400; x80 + 8192 + 524,288,000 = 68,976,648,192. */
START_TEST(test_dense_counts) {
    const struct {
        const char *name;
        int64_t total;
    } want[] = {
        {"gemma-7b", INT64_C(8537680896)},  {"gemma-2b", INT64_C(2506172416)},
        {"phi3-mini", INT64_C(3821079552)}, {"llama2-7b", INT64_C(6738415616)},
        {"llama2-13b", INT64_C(13015864320)}, {"llama2-70b", INT64_C(68976648192)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ft_model m = load(want[i].name);
        est_params p = count(&m);
        ck_assert_msg(p.total == want[i].total, "%s: %lld", want[i].name, (long long)p.total);
        ck_assert_int_eq(p.active, p.total); /* dense: every parameter is used */
        ck_assert_int_eq(m.params_official, want[i].total);
    }
    ft_model g = load("gemma-7b");
    ck_assert(g.tied_embeddings); /* GemmaConfig's default: the file sets nothing */
    ck_assert_int_eq(g.head_dim, 256);
    ck_assert_int_eq(g.activation, FT_ACT_GELU_TANH);
    ck_assert(g.embed_scale && g.norm_plus_one);
    ck_assert(!ft_model_is_llama_family(&g));
    ft_model phi = load("phi3-mini");
    ck_assert(phi.fused_qkv && phi.fused_gate_up);
    /* Phi-3's largest block tensor is the fused gate_up_proj, 3072 x 16384. */
    ck_assert_int_eq(count(&phi).layer.largest, INT64_C(3072) * 16384);
}
END_TEST

/* Mixtral-8x7B per block: attention 2 x 4096^2 + 2 x 4096 x 1024 =
 * 41,943,040; 8 experts x 3 x 4096 x 14336 = 1,409,286,144; router 4096 x 8
 * = 32,768; norms 8192: 1,451,270,144; x32 + 4096 + 2 x 131,072,000 =
 * 46,702,792,704. Active (top-2): 41,943,040 + 352,321,536 + 32,768 + 8192
 * = 394,305,536; x32 + 262,148,096 = 12,879,925,248 (the "12.9B").
 * Qwen1.5-MoE-A2.7B per block: attention with q/k/v biases 3 x 4,196,352 +
 * 4,194,304 = 16,783,360; 60 experts x 3 x 2048 x 1408 = 519,045,120; shared
 * expert 3 x 2048 x 5632 + its gate 2048 = 34,605,056; router 2048 x 60 =
 * 122,880; norms 4096: 570,560,512; x24 + 2048 + 2 x 311,164,928 =
 * 14,315,784,192. Active (top-4): 16,783,360 + 4 x 8,650,752 + 34,605,056 +
 * 122,880 + 4096 = 86,118,400; x24 + 622,331,904 = 2,689,173,504 ("A2.7B"). */
START_TEST(test_moe_counts) {
    ft_model mx = load("mixtral-8x7b");
    ck_assert_int_eq(mx.num_experts, 8);
    ck_assert_int_eq(mx.experts_per_token, 2);
    est_params p = count(&mx);
    ck_assert_int_eq(p.total, INT64_C(46702792704));
    ck_assert_int_eq(p.active, INT64_C(12879925248));
    ck_assert_int_eq(p.layer.largest, INT64_C(4096) * 14336); /* one expert's w1, not all */
    ft_model q = load("qwen1.5-moe-a2.7b");
    p = count(&q);
    ck_assert_int_eq(p.total, INT64_C(14315784192));
    ck_assert_int_eq(p.active, INT64_C(2689173504));
    ck_assert_int_eq(p.layer.shared_expert, INT64_C(34605056));

    /* --router-aux-loss (output_router_logits): 24 layers x T x 60 experts of
     * router logits in bf16 plus their fp32 softmax, T = 1024, module cast. */
    est_run run;
    est_run_defaults(&run, &q, NULL);
    run.seq_len = 1024;
    const int64_t before = est_model_saved_bytes(&run);
    run.model.output_router_logits = true;
    ck_assert_int_eq(est_model_saved_bytes(&run) - before, INT64_C(24) * 1024 * 60 * (2 + 4));
}
END_TEST

/* Mixtral block saved, DeepSpeed bf16 (module cast: every tensor 2 bytes),
 * SDPA, T = 1024, per token (h 4096, expert width fe 14336, k 2, 8 experts):
 *   two norms: fp32 input 4h + rsqrt 4 + normalized 2h          = 12h + 8
 *   attention norm output 2h; q, k, v (KV repeated to 32 heads), output 8h
 *   MLP norm output (the router's input)                        = 2h
 *   router softmax fp32 8 x 4 = 32; top-k indices 2 x 8 = 16;
 *   renormalization clone and sums 2 x 4 + 4 = 12; where() indices 2 x 2 x 8 = 32
 *   gathered inputs k x 2h = 4h; experts' four SwiGLU tensors k x 4 x 2 fe = 16 fe
 *   expert outputs k x 2h = 4h and weights k x 2 = 4
 * = 32h + 16 fe + 104 per token; per layer RoPE 2 x 1024 x 128 x 2 and the
 * log-sum-exp 32 x 1024 x 4. */
START_TEST(test_moe_block_saved) {
    ft_model m = load("mixtral-8x7b");
    est_run run;
    est_run_defaults(&run, &m, NULL);
    run.precision = EST_PREC_BF16_MIXED; /* framework deepspeed: module cast */
    run.seq_len = 1024;
    est_terms t;
    est_block_saved(&run, &t);
    const int64_t T = 1024, h = 4096, fe = 14336;
    ck_assert_int_eq(t.total, T * (32 * h + 16 * fe + 104) + 2 * 1024 * 128 * 2 + 32 * 1024 * 4);
    /* Full checkpointing, inside a block: one expert's rows at a time, k x T / E
     * = 256 rows x 3 x fe x 2 bytes. */
    ck_assert_int_eq(est_block_ckpt_forward_bytes(&run), 256 * 3 * fe * 2);
}
END_TEST

/* GemmaRMSNorm saves its normalized value in fp32 (4 bytes instead of 2 in a
 * module-cast run) and the fp32 (1 + weight) vector: two norms per block. */
START_TEST(test_gemma_norm) {
    ft_model m = load("gemma-2b");
    est_run run;
    est_run_defaults(&run, &m, NULL);
    run.seq_len = 512;
    est_terms gemma, plain;
    est_block_saved(&run, &gemma);
    run.model.norm_plus_one = false;
    est_block_saved(&run, &plain);
    ck_assert_int_eq(gemma.total - plain.total, 2 * (512 * 2048 * (4 - 2) + 2048 * 4));
    /* Gemma computes RoPE per call (no per-layer caches), Mixtral keeps them. */
    run.model.norm_plus_one = true;
    ck_assert_int_eq(est_rope_cache_bytes(&run), 0);
}
END_TEST

START_TEST(test_refusals) {
    char err[256];
    ft_model m;
    const char *dense_layers =
        "{\"model_type\":\"qwen2_moe\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"mlp_only_layers\":[1]}";
    ck_assert_int_eq(ft_model_parse(dense_layers, strlen(dense_layers), "x", &m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "dense layers"));
    const char *topk = "{\"model_type\":\"mixtral\",\"vocab_size\":100,\"hidden_size\":64,"
                       "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                       "\"num_local_experts\":2,\"num_experts_per_tok\":3}";
    ck_assert_int_eq(ft_model_parse(topk, strlen(topk), "x", &m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "num_experts_per_tok"));
    const char *gemma2 = "{\"model_type\":\"gemma3\",\"vocab_size\":100,\"hidden_size\":64,"
                         "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4}";
    ck_assert_int_eq(ft_model_parse(gemma2, strlen(gemma2), "x", &m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "gemma3_text")); /* the VLM's text model is */
    const char *other = "{\"model_type\":\"deepseek_v3\",\"vocab_size\":100,\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4}";
    ck_assert_int_eq(ft_model_parse(other, strlen(other), "x", &m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not supported"));
    /* architectures[] alone names the model type. */
    const char *by_class = "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"vocab_size\":100,"
                           "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                           "\"num_attention_heads\":4}";
    ck_assert_int_eq(ft_model_parse(by_class, strlen(by_class), "x", &m, err, sizeof err), 0);
    ck_assert_int_eq(m.arch, FT_ARCH_QWEN2_MOE);
    ck_assert_int_eq(m.num_experts, 60); /* Qwen2MoeConfig's defaults */

    /* The estimator's ftrain profile and LoRA refuse what they do not model. */
    est_run run;
    m = load("mixtral-8x7b");
    est_run_defaults(&run, &m, NULL);
    run.framework = EST_FW_FTRAIN;
    run.attention = EST_ATTN_FLASH;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ftrain implements"));
    /* Phi-3's q, k, v are one qkv_proj: k and v name no module. */
    m = load("phi3-mini");
    est_run_defaults(&run, &m, NULL);
    run.framework = EST_FW_HF;
    run.lora.rank = 8;
    ck_assert_int_eq(run.lora.targets, EST_LORA_BIT(EST_LORA_Q)); /* ftest's default there: qkv_proj */
    run.lora.targets |= EST_LORA_BIT(EST_LORA_V);
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "qkv_proj"));

    /* The trainer refuses with one line. */
    tr_config cfg;
    bool help = false;
    char *argv[] = {"ftrain", "--model", "gemma-2b", NULL};
    ck_assert_int_eq(tr_cli_parse(3, argv, &cfg, &help, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ftrain implements"));
}
END_TEST

/* Gemma-2-9B (h 3584, 16 heads x 256, 8 KV heads, I 14336, 42 layers, V
 * 256000, tied; four norms per block): 3584 x 4096 x 2 + 3584 x 2048 x 2 +
 * 3 x 3584 x 14336 + 4 x 3584 = 198,195,200; x42 + 3584 + 917,504,000 =
 * 9,241,705,984. Memory: the post-attention and post-MLP norms save an fp32
 * input, rsqrt, fp32 normalized value and (1 + w) each (module cast: 8h + 4 per
 * token + 4h bytes); eager attention saves the soft-capped scores' tanh
 * output (heads x s x s x 2); the logits' soft-cap its tanh output (s x V x 2). */
START_TEST(test_gemma2) {
    ft_model m = load("gemma2-9b");
    ck_assert_int_eq(m.arch, FT_ARCH_GEMMA2);
    ck_assert(m.tied_embeddings && m.sandwich_norms);
    ck_assert_int_eq(count(&m).total, INT64_C(9241705984));
    est_run run;
    est_run_defaults(&run, &m, NULL);
    run.seq_len = 256;
    run.attention = EST_ATTN_EAGER;
    const int64_t T = 256, h = 3584;
    est_terms g2, plain;
    est_block_saved(&run, &g2);
    run.model.sandwich_norms = false;
    run.model.attn_logit_softcap = 0;
    est_block_saved(&run, &plain);
    ck_assert_int_eq(g2.total - plain.total, 2 * (T * (8 * h + 4) + 4 * h) + 16 * T * T * 2);
    est_terms lg, lp;
    run.model.final_logit_softcap = 30;
    est_logits_backward(&run, &lg);
    run.model.final_logit_softcap = 0;
    est_logits_backward(&run, &lp);
    ck_assert_int_eq(lg.total - lp.total, T * 256000 * 2);
    /* An explicit null turns the soft-cap off. */
    const char *nocap = "{\"model_type\":\"gemma2\",\"vocab_size\":100,\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                        "\"final_logit_softcapping\":null}";
    char err[256];
    ck_assert_int_eq(ft_model_parse(nocap, strlen(nocap), "x", &m, err, sizeof err), 0);
    ck_assert(m.final_logit_softcap == 0 && m.attn_logit_softcap == 50);
}
END_TEST

/* Qwen3 (transformers 4.51 modeling_qwen3.py), Qwen3-MoE and Gemma 3 text
 * (4.50 modeling_gemma3.py) counts, by hand:
 *   Qwen3-8B (h 4096, 32 x 128 queries, 8 KV heads, I 12288, 36 layers,
 *   V 151936, untied, no biases; q_norm and k_norm of 128): 2 x 4096^2 +
 *   2 x 4096 x 1024 + 3 x 4096 x 12288 + 2 x 4096 + 2 x 128 = 192,946,432;
 *   x36 + 4096 + 2 x 622,329,856 = 8,190,735,360 (6.95 B without embeddings).
 *   Qwen3-30B-A3B (h 2048, 32 x 128 queries, 4 KV heads, 48 layers, 128
 *   experts of 768, top-8, router 2048 x 128): attention 8,388,608 x 2 +
 *   2,097,152 = 18,874,368; experts 128 x 3 x 2048 x 768 = 603,979,776;
 *   router 262,144; norms 4096 + 256: 623,120,640 per block; x48 + 2048 +
 *   2 x 311,164,928 = 30,532,122,624. Active: 18,874,368 + 8 x 4,718,592 +
 *   262,144 + 4352 = 56,889,600; x48 + 622,331,904 = 3,353,032,704.
 *   Gemma 3 1B (h 1152, 4 x 256 queries, one KV head of 256, I 6912, 26
 *   layers, V 262144, tied; four norms of h and two of 256): 2 x 1152 x 1024
 *   + 2 x 1152 x 256 + 3 x 1152 x 6912 + 4 x 1152 + 512 = 26,842,112; x26 +
 *   1152 + 301,989,888 = 999,885,952.
 *   Mistral-Small-24B (h 5120, 32 x 128 queries: q is 5120 x 4096, not
 *   square; 8 KV heads, I 32768, 40 layers, V 131072, untied): 2 x 5120 x
 *   4096 + 2 x 5120 x 1024 + 3 x 5120 x 32768 + 2 x 5120 = 555,755,520; x40 +
 *   5120 + 2 x 671,088,640 = 23,572,403,200. */
START_TEST(test_qwen3_gemma3_counts) {
    ft_model q = load("qwen3-8b");
    ck_assert_int_eq(q.arch, FT_ARCH_QWEN3);
    ck_assert(q.qk_norm && !q.qkv_bias && !q.tied_embeddings);
    est_params p = count(&q);
    ck_assert_int_eq(p.layer.total, INT64_C(192946432));
    ck_assert_int_eq(p.total, INT64_C(8190735360));
    ft_model moe = load("qwen3-30b-a3b");
    ck_assert_int_eq(moe.num_experts, 128);
    ck_assert_int_eq(moe.shared_expert_intermediate_size, 0);
    ck_assert(moe.norm_topk_prob);
    p = count(&moe);
    ck_assert_int_eq(p.total, INT64_C(30532122624));
    ck_assert_int_eq(p.active, INT64_C(3353032704));
    ft_model g = load("gemma3-1b");
    ck_assert_int_eq(g.arch, FT_ARCH_GEMMA3);
    ck_assert(g.qk_norm && g.sandwich_norms && g.tied_embeddings && g.embed_scale);
    ck_assert(g.attn_logit_softcap == 0 && g.final_logit_softcap == 0); /* null in the config */
    ck_assert_int_eq(g.sliding_window, 512);
    ck_assert_int_eq(g.global_layers, 4); /* layers 5, 11, 17, 23 of 26 */
    ck_assert_int_eq(count(&g).total, INT64_C(999885952));
    ft_model ms = load("mistral-small-24b");
    ck_assert_int_eq(ms.head_dim, 128);
    ck_assert_int_eq(count(&ms).total, INT64_C(23572403200));
    /* The module graph declares the same parameters. */
    est_run run;
    est_run_defaults(&run, &q, NULL);
    est_regime reg = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true, .adapter = 4};
    est_module m;
    char err[200];
    ck_assert_int_eq(est_module_block(&run, &reg, false, &m, err, sizeof err), 0);
    ck_assert_int_eq(est_module_param_elems(&m), INT64_C(192946432));
}
END_TEST

/* q_norm and k_norm saved, module cast in bf16, full fine-tune, T = 1024.
 * Qwen3RMSNorm over n elements in rows of 128: the fp32 input (kept by pow
 * and by the product with rsqrt) n x 4, rsqrt per row x 4, and the bf16
 * normalized value the weight multiplies (kept for the weight's gradient)
 * n x 2: q n = 1024 x 32 x 128 in 32768 rows, k n = 1024 x 8 x 128 in 8192:
 *   (4,194,304 + 1,048,576) x 6 + (32,768 + 8,192) x 4 = 31,621,120.
 * Gemma3RMSNorm keeps the fp32 input, rsqrt, the fp32 normalized value and
 * (1 + w) in fp32: Gemma 3 1B, q n = 1024 x 4 x 256, k n = 1024 x 256:
 *   (1,048,576 + 262,144) x 8 + (4096 + 1024) x 4 + 2 x 256 x 4 = 10,508,288. */
START_TEST(test_qk_norm_saved) {
    est_regime reg = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true, .adapter = 4};
    char err[200];
    const struct {
        const char *name;
        int64_t want;
    } cases[] = {{"qwen3-8b", INT64_C(31621120)}, {"gemma3-1b", INT64_C(10508288)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ft_model md = load(cases[i].name);
        est_run run;
        est_run_defaults(&run, &md, NULL);
        run.seq_len = 1024;
        est_module with, without;
        ck_assert_int_eq(est_module_block(&run, &reg, false, &with, err, sizeof err), 0);
        run.model.qk_norm = false;
        ck_assert_int_eq(est_module_block(&run, &reg, false, &without, err, sizeof err), 0);
        ck_assert_msg(est_module_saved_bytes(&with) - est_module_saved_bytes(&without) == cases[i].want,
                      "%s: %lld", cases[i].name,
                      (long long)(est_module_saved_bytes(&with) - est_module_saved_bytes(&without)));
    }
}
END_TEST

/* Gemma 3 1B under flash attention at s = 2048, window w = 512: a local
 * layer's causal pairs are s w - w^2 / 2 = 917,504 of s^2 / 2 = 2,097,152;
 * 4 of 26 layers are global, so a block's attention is
 *   (4 + 22 x 917,504 / 2,097,152) / 26 of the full causal 4 s^2 q / 2
 * (q = 4 x 256). SDPA masks the full square: no saving. */
static double attention_flops(const est_run *run) {
    est_step st;
    est_step_init(&st);
    est_constants k;
    est_constants_defaults(&k);
    char err[200];
    ck_assert_msg(est_step_build(run, &k, &st, err, sizeof err) == 0, "%s", err);
    double f = 0;
    for (size_t i = 0; i < st.unit_count; i++) {
        const est_unit_ref *u = &st.units[i];
        if (u->unit != EST_UNIT_BLOCK_FWD || u->layer != 0) continue;
        for (size_t j = u->body; j < u->body + u->body_len; j++)
            if (st.work[j].kind == EST_EV_ATTENTION) f += st.work[j].u.attn.flops;
    }
    est_step_free(&st);
    return f;
}

START_TEST(test_sliding_window_flops) {
    ft_model g = load("gemma3-1b");
    est_run run;
    est_run_defaults(&run, &g, NULL);
    run.framework = EST_FW_HF;
    run.seq_len = 2048;
    const double full = 4.0 * 2048 * 2048 * 1024 / 2;
    ck_assert_double_eq_tol(attention_flops(&run), full, 1e-3);
    run.attention = EST_ATTN_FLASH;
    ck_assert_double_eq_tol(attention_flops(&run), full * (4 + 22 * (917504.0 / 2097152.0)) / 26, 1e-3);
}
END_TEST

/* LoRA on fused and expert Linears (PEFT finds qkv_proj, gate_up_proj, each
 * expert's w1/w3/w2 and, under all-linear, the router), r 16, all-linear:
 *   Phi-3-mini per block: qkv 16 x (3072 + 9216) + o 16 x (3072 + 3072) +
 *   gate_up 16 x (3072 + 16384) + down 16 x (8192 + 3072) = 786,432; x32 =
 *   25,165,824 (split q, k, v, gate, up would be 1,081,344 a block).
 *   Mixtral-8x7B per block: q, o 16 x 8192 each, k, v 16 x 5120 each =
 *   425,984; 8 experts x 3 x 16 x (4096 + 14336) = 7,077,888; router
 *   16 x (4096 + 8) = 65,664: 7,569,536; x32 = 242,225,152.
 * The module graph's adapters are the same count. Saved under flash, module
 * cast: Phi-3's v is a view of qkv, so flash keeps the whole T x (q + 2 kv)
 * where split projections keep T x kv: T x (q + kv) x 2 bytes more (T =
 * 1024: 1024 x 6144 x 2); SDPA's v.contiguous() keeps a copy of v alone. */
START_TEST(test_fused_and_expert_lora) {
    ft_model phi = load("phi3-mini"), mx = load("mixtral-8x7b");
    est_run run;
    est_run_defaults(&run, &phi, NULL);
    run.framework = EST_FW_HF;
    run.lora.rank = 16;
    run.lora.targets = EST_LORA_ALL_LINEAR;
    char err[200];
    ck_assert_msg(est_run_validate(&run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_lora_block_params(&run), 786432);
    ck_assert_int_eq(est_lora_params(&run), INT64_C(25165824));
    est_regime lreg = {.act = 2, .resid = 2, .autocast = true, .weight = 2, .train_base = false, .adapter = 4};
    est_module m;
    ck_assert_int_eq(est_module_block(&run, &lreg, false, &m, err, sizeof err), 0);
    ck_assert_int_eq(est_module_trainable_elems(&m), 786432);
    est_run mrun;
    est_run_defaults(&mrun, &mx, NULL);
    mrun.framework = EST_FW_HF;
    mrun.lora = run.lora;
    ck_assert_msg(est_run_validate(&mrun, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_lora_params(&mrun), INT64_C(242225152));
    ck_assert_int_eq(est_module_block(&mrun, &lreg, false, &m, err, sizeof err), 0);
    ck_assert_int_eq(est_module_trainable_elems(&m), INT64_C(242225152) / 32);

    est_regime full = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true, .adapter = 4};
    run.lora.rank = 0;
    run.seq_len = 1024;
    const int64_t extra = INT64_C(1024) * 6144 * 2;
    est_module fused, split;
    for (int attn = 0; attn < 2; attn++) {
        run.attention = attn ? EST_ATTN_FLASH : EST_ATTN_SDPA;
        run.model.fused_qkv = run.model.fused_gate_up = true;
        ck_assert_int_eq(est_module_block(&run, &full, false, &fused, err, sizeof err), 0);
        run.model.fused_qkv = run.model.fused_gate_up = false;
        ck_assert_int_eq(est_module_block(&run, &full, false, &split, err, sizeof err), 0);
        ck_assert_int_eq(est_module_saved_bytes(&fused) - est_module_saved_bytes(&split), attn ? extra : 0);
        ck_assert_int_eq(est_module_param_elems(&fused), est_module_param_elems(&split));
    }
}
END_TEST

Suite *suite_architectures(void);
Suite *suite_architectures(void) {
    Suite *s = suite_create("architectures");
    TCase *tc = tcase_create("architectures");
    tcase_add_test(tc, test_dense_counts);
    tcase_add_test(tc, test_moe_counts);
    tcase_add_test(tc, test_moe_block_saved);
    tcase_add_test(tc, test_gemma_norm);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_gemma2);
    tcase_add_test(tc, test_qwen3_gemma3_counts);
    tcase_add_test(tc, test_qk_norm_saved);
    tcase_add_test(tc, test_sliding_window_flops);
    tcase_add_test(tc, test_fused_and_expert_lora);
    suite_add_tcase(s, tc);
    return s;
}
