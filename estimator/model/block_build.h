/* What the module builders (block.c, block_linear.c, block_ends.c) share:
 * the builder's context and one-line op helpers. Internal to estimator/model/. */
#ifndef EST_BLOCK_BUILD_H
#define EST_BLOCK_BUILD_H

#include "run_desc.h"
#include "lora.h"
#include "module_graph.h"
#include "peft.h"

typedef struct est_bld {
    est_module *m;
    const est_run *run;
    const est_regime *g;
    int64_t b, s, T;        /* micro-batch, sequence, tokens */
    int64_t base_param[EST_LORA_TARGET_COUNT]; /* each Linear's weight operand */
    int64_t base_bias[EST_LORA_TARGET_COUNT];  /* its bias operand, or EST_NONE */
    int lora_a[EST_LORA_TARGET_COUNT], lora_b[EST_LORA_TARGET_COUNT];
    int dora_m[EST_LORA_TARGET_COUNT];  /* DoRA's magnitude vector, or EST_NONE */
    int ia3[EST_LORA_TARGET_COUNT];     /* IA3's scaling vector, or EST_NONE */
    int vec[EST_LORA_TARGET_COUNT][4];  /* AdaLoRA A, E, B; (P)VeRA lambda_d, lambda_b; MiSS's block;
                                           TinyLoRA v, A, B, P (block_peft_vec.c), or EST_NONE */
    int pdelta[EST_LORA_TARGET_COUNT][4]; /* LoHa/LoKr/OFT/FourierFT parameters (block_pdelta.c) */
    int moe_router, moe_shared[4]; /* MoE: router, shared expert's gate/up/down and gate */
    int moe_router_la, moe_router_lb;       /* their adapters (all-linear), or EST_NONE */
    int moe_shared_la[4], moe_shared_lb[4];
} est_bld;

void est_bld_init(est_bld *b, est_module *m, const est_run *run, const est_regime *g);

/* An op of one or two operands making elems x bytes. */
int est_op1(est_bld *b, est_op_kind kind, const char *name, int64_t elems, int bytes, int a);
int est_op2(est_bld *b, est_op_kind kind, const char *name, int64_t elems, int bytes, int a,
            int c);
/* x cast to `bytes` per element: x itself when it already is. */
int est_cast(est_bld *b, const char *name, int x, int bytes);

/* The run's stack computes RoPE's cos/sin once per forward at the model level
 * (stack.h rope_once_per_forward): the embedding module makes them and every
 * block reads them as inputs (module_graph.h est_shared). */
bool est_rope_shared(const est_run *run);

/* Attention takes an explicit (b, 1, s, s) mask: a padded batch under SDPA or
 * eager, or eager attention at all. The embedding builds it (block_ends.c
 * causal_mask) and every block reads it. */
bool est_attention_masked(const est_run *run);

/* An RMSNorm over the residual stream (block_norm.c) (Llama's, or Gemma's (1 + weight) in fp32). */
int est_rmsnorm(est_bld *b, const char *name, int x, int weight, bool plus_one);
/* The same over rows of h elements (a head's q or k). */
int est_rmsnorm_over(est_bld *b, const char *name, int x, int weight, bool plus_one, int64_t h);

/* A block Linear as the run computes it: the frozen or trained base (autocast's
 * casts, bitsandbytes' dequantization) plus its LoRA adapter when targeted. */
int est_block_linear(est_bld *b, est_lora_target t, const char *name, int x);

/* F.linear(x, w) on `rows` rows under the regime (no adapter, never quantized: the LM head). */
/* F.linear(x, w, bias) under the regime on `rows` token rows (autocast
 * casts x and reads w's cached cast; block_matmul.c). */
int est_linear_op(est_bld *b, const char *name, int x, int w, int bias, int64_t rows, int64_t din,
                  int64_t dout);
int est_linear_rows(est_bld *b, const char *name, int x, int w, int64_t rows, int64_t din,
                    int64_t dout);

/* The keys and values after RoPE as the attention reads them (block_kv.c):
 * the KV cache Transformers builds in training (use_cache without
 * checkpointing), and repeat_kv for grouped-query attention where the
 * attention kernel does not take the groups itself. */
void est_attention_kv(est_bld *b, int *k, int *v, int mask);
/* A frozen or trained Linear on `rows` rows (bitsandbytes' storage under a
 * quantized LoRA base) with its adapter (la, lb: parameters, or EST_NONE):
 * experts, routers, shared experts. */
int est_linear_adapted(est_bld *b, const char *name, int x, int w, int bias, int la, int lb, int64_t rows,
                       int64_t din, int64_t dout);

/* Declares an adapter A (r, din), B (dout, r) named stem.lora_A/B. */
void est_adapter_params(est_bld *b, const char *stem, int64_t din, int64_t dout, int *la, int *lb);
/* One of PEFT's adapter tensors of Linear t, named "<stem>.<what>", in the
 * adapters' dtype; `trains`: a parameter (else a frozen buffer). */
int est_adapter_param(est_bld *b, int t, const char *stem, const char *what, int64_t rows, int64_t cols,
                      bool trains);

/* Declares the block's Linear weights (and adapters); norms are declared by the block. */
void est_block_linear_params(est_bld *b);

/* Mixture of experts (block_moe.c): the router and experts' parameters (after
 * est_block_linear_params, whose gate/up/down are the routed experts), and the
 * sparse MLP on x. */
void est_moe_params(est_bld *b);
int est_moe_mlp(est_bld *b, int x);
/* The run's stack stores the routed experts fused (transformers 5.x, stack.h
 * moe_experts_fused): est_moe_params declares them, not est_block_linear_params. */
bool est_moe_fused(const est_run *run);

/* The head after the LM head's input `x` (weight w) for a preference
 * objective (block_rl.c): the policy's log-probs and loss, or a reference
 * model's log-probs under no_grad. */
int est_rl_loss(est_bld *b, int x, int w);
int est_rl_reference_head(est_bld *b, int x, int w);

int est_bld_done(est_bld *b, int output, char *err, size_t errlen);

/* Sequence parallelism (block_tp.c, tp.h): x (tokens / tp rows) all-gathered
 * along the sequence into every token, as a ColwiseParallel projection's
 * input; and a RowwiseParallel projection's partial sums (every token)
 * reduce-scattered into this rank's tokens / tp rows. Both return x itself
 * without --tp. */
int est_tp_gather(est_bld *b, int x);
int est_tp_scatter(est_bld *b, int x);

/* Liger-Kernel's Triton kernels in place of the eager ops (block_liger.c,
 * liger.h): RMSNorm over rows of h (LigerRMSNormFunction), RoPE on q and k
 * in place (LigerRopeFunction: q and k stay the same tensors), the gated
 * MLP's activation and product (LigerSiLUMulFunction / LigerGELUMulFunction;
 * `gate` == `up` for Phi-3's fused gate_up_proj) and the cross-entropy on
 * the fp32 logits (LigerCrossEntropyFunction; returns the loss). */
int est_liger_rmsnorm(est_bld *b, const char *name, int x, int weight, int64_t h);
void est_liger_rope(est_bld *b, int q, int k, int cos, int sin);
int est_liger_glu(est_bld *b, int gate, int up);
int est_liger_cross_entropy(est_bld *b, int logits);

#endif
