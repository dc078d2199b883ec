/* The model description: the one module estimator and trainer share.
 *
 * Reads Hugging Face `config.json` files (Llama, Mistral, Qwen2; for the
 * estimator also Gemma, Phi-3, Mixtral and Qwen2-MoE)
 * and the shipped models/<name>.json, which are the same format plus an
 * optional "ftest" object with the published parameter total and its source.
 * It describes shapes only; how many bytes anything takes is each side's own
 * business (estimator/model/params.c, trainer sizes). */
#ifndef FT_MODEL_CONFIG_H
#define FT_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FT_NAME_MAX 64

typedef enum {
    FT_ARCH_LLAMA = 0,   /* LlamaForCausalLM: optional attention_bias (q,k,v,o) and mlp_bias */
    FT_ARCH_MISTRAL = 1, /* MistralForCausalLM: no biases */
    FT_ARCH_QWEN2 = 2,   /* Qwen2ForCausalLM: q,k,v biases, none on o or MLP */
    /* Appended; estimate-only (ftrain implements the three above). */
    FT_ARCH_GEMMA = 3,     /* GemmaForCausalLM: GeGLU, tied head, sqrt(h) embedding scale, (1+w) norms */
    FT_ARCH_PHI3 = 4,      /* Phi3ForCausalLM: fused qkv_proj and gate_up_proj */
    FT_ARCH_MIXTRAL = 5,   /* MixtralForCausalLM: sparse MoE MLP, top-k routed experts */
    FT_ARCH_QWEN2_MOE = 6, /* Qwen2MoeForCausalLM: routed experts + a gated shared expert */
    FT_ARCH_GEMMA2 = 7,    /* Gemma2ForCausalLM: Gemma + sandwich norms, logit soft-capping */
    FT_ARCH_QWEN3 = 8,     /* Qwen3ForCausalLM: Qwen2 without q/k/v biases, RMSNorm on each
                              head's q and k */
    FT_ARCH_QWEN3_MOE = 9, /* Qwen3MoeForCausalLM: Qwen3's attention, routed experts, no shared */
    FT_ARCH_GEMMA3 = 10,   /* Gemma3ForCausalLM (gemma3_text): Gemma-2's block, q/k norms,
                              local sliding-window layers between global ones, no soft-caps */
} ft_arch;

/* The MLP's activation: SiLU (SwiGLU) or GELU with the tanh approximation (GeGLU). */
typedef enum { FT_ACT_SILU = 0, FT_ACT_GELU_TANH = 1 } ft_activation;

typedef struct ft_model {
    char name[FT_NAME_MAX];    /* "llama3-8b", or the config file's stem */
    ft_arch arch;
    int64_t vocab_size;        /* V: rows of the embedding and of the LM head */
    int64_t hidden_size;       /* h: residual stream width */
    int64_t intermediate_size; /* SwiGLU inner width (gate/up outputs) */
    int64_t num_layers;        /* L: decoder blocks */
    int64_t num_heads;         /* query heads */
    int64_t num_kv_heads;      /* key/value heads; num_heads % num_kv_heads == 0 (GQA) */
    int64_t head_dim;          /* per-head width; q_proj is (num_heads*head_dim, h) */
    int64_t max_position;      /* longest sequence the model supports; 0 when unknown */
    bool tied_embeddings;      /* LM head shares the embedding matrix */
    bool qkv_bias;             /* q, k, v projections carry a bias */
    bool o_bias;               /* o projection carries a bias */
    bool mlp_bias;             /* gate, up, down carry biases */
    double rms_norm_eps;
    double rope_theta;
    int64_t params_official;   /* published total from the "ftest" object; 0 when unknown */
    char hf_repo[96];          /* where the config comes from, for humans */
    /* Appended for the architectures beyond Llama; zero is Llama's behaviour. */
    ft_activation activation;  /* gated MLP activation */
    bool embed_scale;          /* Gemma: embedding output multiplied by sqrt(hidden_size) */
    bool norm_plus_one;        /* Gemma: RMSNorm in fp32, scaled by (1 + weight) */
    bool fused_qkv;            /* Phi-3: one qkv_proj (h, (heads + 2 kv_heads) * head_dim) */
    bool fused_gate_up;        /* Phi-3: one gate_up_proj (h, 2 * intermediate) */
    int64_t num_experts;       /* MoE: routed experts per layer; 0 = dense MLP */
    int64_t experts_per_token; /* MoE: top-k experts each token is routed to */
    int64_t moe_intermediate_size; /* MoE: one routed expert's inner width */
    int64_t shared_expert_intermediate_size; /* Qwen2-MoE shared expert's width; 0 = none */
    bool norm_topk_prob;       /* MoE: top-k routing weights renormalized to sum 1 */
    bool sandwich_norms;       /* Gemma-2: RMSNorm after attention and around the MLP (4 per block) */
    double attn_logit_softcap; /* Gemma-2: scores = cap * tanh(scores / cap); 0 = none */
    double final_logit_softcap;/* Gemma-2: the same on the logits; 0 = none */
    int64_t sliding_window;    /* local attention window of some layers; 0 = none */
    bool output_router_logits; /* MoE: router logits kept for the load-balancing loss */
    /* Appended for Qwen3 and Gemma 3 (transformers 4.50-4.51). */
    bool qk_norm;              /* RMSNorm over each head of q and of k (two head_dim weights) */
    int64_t global_layers;     /* with sliding_window: layers attending to the whole sequence,
                                  the others within the window (Gemma-2: every other one,
                                  Gemma 3: every sixth) */
} ft_model;

/* True for the architectures ftrain implements (Llama, Mistral, Qwen2). */
bool ft_model_is_llama_family(const ft_model *m);

/* Largest shapes accepted; beyond these a config is treated as malformed. They
 * keep every derived byte count far below INT64_MAX (405B params, 1M tokens). */
#define FT_MAX_HIDDEN ((int64_t)1 << 17)
#define FT_MAX_VOCAB ((int64_t)1 << 23)
#define FT_MAX_LAYERS ((int64_t)4096)
#define FT_MAX_HEADS ((int64_t)4096)
#define FT_MAX_POSITION ((int64_t)1 << 24)

/* Parses config.json text. `name` labels the model (and error messages). */
int ft_model_parse(const char *text, size_t len, const char *name, ft_model *out, char *err,
                   size_t errlen);

/* Loads a shipped model by name (models/<name>.json) or any config.json by path
 * (anything containing '/' or ending in .json). Unknown names get the closest
 * shipped names suggested in the message. */
int ft_model_load(const char *name_or_path, ft_model *out, char *err, size_t errlen);

/* The repository data root holding models/ and calibrate/: $FTEST_DATA_DIR, else
 * the source tree one or two folders above the running executable (its build
 * folder; the tree must hold models/, calibrate/profiles/ and estimator/), or,
 * installed, PREFIX/share/ftest when the executable is PREFIX/bin/ftest; else
 * ./models of the working directory; else the build-time root. */
const char *ft_data_dir(void);

/* Joins ft_data_dir() and a relative path into buf; returns buf. */
const char *ft_data_path(const char *relative, char *buf, size_t buflen);

/* Names of the shipped models (sorted). Returns the count (<= max), or -1 on error. */
int ft_model_names(char (*names)[FT_NAME_MAX], int max, char *err, size_t errlen);

/* Fills `out` with the names from `names` close to `query` ("a, b or c"; "" when
 * none is close): ft_suggest_close (suggest.h) over a model-name list. */
void ft_suggest(const char *query, char (*names)[FT_NAME_MAX], int n, char *out, size_t outlen);

const char *ft_arch_name(ft_arch a);

#endif
