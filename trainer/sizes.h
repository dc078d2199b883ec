/* Sizes first (llm.c style): one pure function turns a configuration into the
 * element count and byte size of every parameter, gradient, optimizer state,
 * activation, logit, communication and workspace buffer of one rank. Nothing
 * is allocated here; the arena plans its slabs from these numbers and the model
 * takes typed pointers into them. docs/trainer.md writes every formula out. */
#ifndef TR_SIZES_H
#define TR_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Parameter tensors, in their order inside a unit's flat vector. Fused pairs
 * are stored back to back so one matmul serves them: qkv_w is q_proj, k_proj,
 * v_proj stacked on the output axis, gu_w is gate_proj then up_proj. */
typedef enum {
    TR_T_EMBED,   /* (V, h) model.embed_tokens.weight */
    TR_T_LN1,     /* (h) input_layernorm.weight */
    TR_T_QKV_W,   /* (qd + 2 kvd, h) q_proj, k_proj, v_proj weights */
    TR_T_QKV_B,   /* (qd + 2 kvd) their biases (qkv_bias) */
    TR_T_O_W,     /* (h, qd) o_proj.weight */
    TR_T_O_B,     /* (h) o_proj.bias (o_bias) */
    TR_T_LN2,     /* (h) post_attention_layernorm.weight */
    TR_T_GU_W,    /* (2 I, h) gate_proj then up_proj weights */
    TR_T_GU_B,    /* (2 I) their biases (mlp_bias) */
    TR_T_DOWN_W,  /* (h, I) down_proj.weight */
    TR_T_DOWN_B,  /* (h) down_proj.bias (mlp_bias) */
    TR_T_NORM_F,  /* (h) model.norm.weight */
    TR_T_LM_HEAD, /* (V, h) lm_head.weight (untied only) */
    TR_T_COUNT
} tr_tensor_id;

/* A unit is what ZeRO shards and gathers as one flat vector (as FSDP's flat
 * parameters): the embedding, each block, and the head (final norm + untied
 * lm_head). Its length is padded up to a multiple of the rank count when it
 * is sharded, so every rank holds an equal shard. */
typedef struct tr_unit {
    int64_t numel;              /* parameters in the unit */
    int64_t padded;             /* numel rounded up to a multiple of sizes.pad */
    int64_t shard;              /* padded / ranks when sharded (stage >= 1), else padded */
    int64_t off[TR_T_COUNT];    /* element offset of each tensor inside the unit; -1 absent */
    int64_t len[TR_T_COUNT];    /* elements of each tensor; 0 absent */
} tr_unit;

enum { TR_UNIT_EMB = 0, TR_UNIT_LAYER = 1, TR_UNIT_HEAD = 2, TR_UNIT_KINDS = 3 };

typedef struct tr_sizes {
    /* Shapes. */
    int64_t V, h, I, L;         /* vocab, hidden, intermediate, blocks trained */
    int64_t nh, nkv, hd;        /* query heads, kv heads, head dim */
    int64_t qd, kvd, qkvd;      /* nh*hd, nkv*hd, qd + 2*kvd */
    int64_t B, T, BT;           /* micro-batch, sequence, B*T tokens */
    int ranks, zero;
    int64_t cd;                 /* bytes of the compute dtype: 4 (fp32) or 2 (bf16-mixed) */

    /* Parameter layout. Units in order: emb, L blocks, head. */
    int64_t pad;                /* ranks when stage >= 1, else 1 */
    tr_unit unit[TR_UNIT_KINDS];/* emb, (every) block, head */
    int64_t n_units;            /* L + 2 */
    int64_t params_numel;       /* the model's parameter count (unpadded) */
    int64_t full_numel;         /* Σ padded: the full flat vector */
    int64_t shard_numel;        /* Σ shard: one rank's partition */
    int64_t opt_numel;          /* elements the rank's optimizer updates: full at stage 0, else shard */

    /* Persistent device bytes (allocated at init). */
    int64_t params_bytes, master_bytes, grads_bytes, opt_bytes;
    /* Host (offload) bytes. */
    int64_t host_params_bytes, host_master_bytes, host_grads_bytes, host_opt_bytes;
    /* Communication buffers, per unit kind: ZeRO-3 gathers, ZeRO-2/3 reduce buckets. */
    int64_t gather_bytes[TR_UNIT_KINDS], bucket_bytes[TR_UNIT_KINDS];

    /* Activations (bytes). One block's saved tensors: */
    int64_t ln_bytes;           /* (B,T,h) cd: ln1, ln2, resmid, resout, encoded, lnf, dres, dln */
    int64_t rstd_bytes;         /* (B,T) fp32: rstd1, rstd2, rstdf */
    int64_t qkv_bytes;          /* (B,T,qkvd) cd: qkv, dqkv */
    int64_t probs_bytes;        /* (B,nh,T,T) cd: eager attention probabilities (and their grad) */
    int64_t lse_bytes;          /* (B,nh,T) fp32: flash attention row logsumexp */
    int64_t att_bytes;          /* probs_bytes (eager) or lse_bytes (flash) */
    int64_t atty_bytes;         /* (B,T,qd) cd: attention output, datty */
    int64_t gu_bytes;           /* (B,T,2I) cd: gate|up, dgu */
    int64_t hact_bytes;         /* (B,T,I) cd: silu(gate)*up, dhact */
    int64_t slot_bytes;         /* one block's saved set without resout (the recompute slot) */
    int64_t datt_ws_bytes;      /* eager backward dP workspace (probs_bytes), 0 for flash */
    int64_t att_ws_bytes;       /* selective: the attention core's transient (att_bytes), else 0 */
    /* Logits. */
    int64_t losses_bytes;       /* (B,T) fp32 per-token losses */
    int64_t logits_rows;        /* BT (standard) or min(BT, TR_CHUNKED_LOSS_ROWS) (chunked) */
    int64_t logits_bytes;       /* logits_rows * V * cd */
} tr_sizes;

/* Fills every size. 0, or -1 with a message when a size would overflow or
 * exceed the planning limit (2^50 bytes). The config must be validated. */
int tr_sizes_compute(const tr_config *cfg, tr_sizes *s, char *err, size_t errlen);

/* Element offset of unit u (0 = emb, 1..L = block u-1, L+1 = head) in the
 * full flat vector, and in this rank's shard vector. */
int64_t tr_unit_full_off(const tr_sizes *s, int64_t u);
int64_t tr_unit_shard_off(const tr_sizes *s, int64_t u);
/* Descriptor of unit u. */
const tr_unit *tr_unit_of(const tr_sizes *s, int64_t u);
int tr_unit_kind(const tr_sizes *s, int64_t u);

/* Rows and columns of tensor t (columns 1 for vectors). */
void tr_tensor_shape(const tr_sizes *s, tr_tensor_id t, int64_t *rows, int64_t *cols);
/* True for the 2-D weights that take weight decay (not norms, not biases). */
int tr_tensor_decays(tr_tensor_id t);
const char *tr_tensor_name(tr_tensor_id t);

#endif
