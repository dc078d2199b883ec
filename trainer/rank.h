/* One rank's training state: its sizes, its two arenas (device, host) and the
 * typed buffers into them, with the pointers of a unit's weights and
 * gradients. model.h creates a rank and runs its micro-batch; step.c (the
 * ops of each stage) and zero.c (ZeRO's collectives) work on this state and
 * include this header only, so model.c can call them without a cycle
 * (tests/structure.c). Each buffer's lifetime is model.h's to decide. */
#ifndef TR_RANK_H
#define TR_RANK_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "comm.h"
#include "config.h"
#include "sizes.h"

/* Tensors one block saves for its backward. Shapes use BT = B*T tokens. */
typedef struct tr_layer_acts {
    tr_buf ln1;     /* (BT, h) cd: input_layernorm output */
    tr_buf rstd1;   /* (BT) fp32: its reciprocal RMS */
    tr_buf qkv;     /* (BT, qd + 2 kvd) cd: q, k after RoPE, v */
    tr_buf att;     /* eager (B, nh, T, T) cd probabilities | flash (B, nh, T) fp32 lse; absent (selective) */
    tr_buf atty;    /* (BT, qd) cd: attention output before o_proj */
    tr_buf resmid;  /* (BT, h) cd: residual after attention */
    tr_buf ln2;     /* (BT, h) cd: post_attention_layernorm output */
    tr_buf rstd2;   /* (BT) fp32 */
    tr_buf gu;      /* (BT, 2I) cd: gate | up projections */
    tr_buf hact;    /* (BT, I) cd: silu(gate) * up */
    tr_buf resout;  /* (BT, h) cd: block output = next block's input */
} tr_layer_acts;

#define TR_SLOT_BUFS 10 /* tr_layer_acts without resout */

typedef struct tr_rank {
    const tr_config *cfg;
    tr_sizes s;
    const tr_backend *be;
    tr_backend_ctx bctx;        /* this rank's device, streams and error status */
    bool bctx_open;
    tr_comm *comm;              /* this rank's handle */
    int rank;
    tr_dtype dt;                /* compute dtype: F32 or BF16 */
    tr_arena dev, host;

    /* Persistent state (init to the end). */
    tr_buf params;              /* (full) cd, or (shard) cd at ZeRO-3; absent with params offloaded */
    tr_buf master;              /* (opt) fp32: bf16-mixed without offload */
    tr_buf grads;               /* (full) cd, or (shard) cd at ZeRO-2/3 */
    tr_buf opt_m, opt_v;        /* (opt) fp32 each: AdamW moments, without offload */
    tr_buf h_params;            /* host (shard) cd: optimizer+params offload */
    tr_buf h_master;            /* host (opt) fp32: offload (not when h_params is fp32) */
    tr_buf h_grads;             /* host (opt) fp32: offload */
    tr_buf h_m, h_v;            /* host (opt) fp32 each: AdamW with offload */
    /* Communication: one unit gathered (ZeRO-3) / reduced (ZeRO-2/3) at a time, per unit kind. */
    tr_buf gather[TR_UNIT_KINDS];  /* (padded unit) cd */
    tr_buf bucket[TR_UNIT_KINDS];  /* (padded unit) cd */

    /* Activations of one micro-batch. */
    tr_buf batch;               /* (2, BT) int32: input tokens, then targets */
    tr_buf encoded;             /* (BT, h) cd: embedding output = block 0 input */
    tr_layer_acts *acts;        /* L blocks; checkpointing=full keeps only resout */
    tr_layer_acts rc;           /* checkpointing=full: one block's set, recomputed (resout unused) */
    tr_buf lnf;                 /* (BT, h) cd: final norm output */
    tr_buf rstdf;               /* (BT) fp32 */
    tr_buf dres;                /* (BT, h) cd: gradient of the residual stream */
    tr_buf dln;                 /* (BT, h) cd: gradient of a norm's output */
    tr_buf dqkv, datty, dgu, dhact; /* one block's activation gradients */
    tr_buf att_ws;              /* workspace: selective recompute of the attention core */
    tr_buf datt_ws;             /* workspace: eager attention's dP (B, nh, T, T) cd */
    tr_buf losses;              /* logits: (BT) fp32 per-token loss */
    tr_buf logits;              /* logits: (rows, V) cd, rows = BT or the chunk */

    int32_t *host_batch;        /* (2, BT) staging for the data loader, outside the arenas */
    float *host_losses;         /* (BT) staging to sum the loss on the host, outside the arenas */
} tr_rank;

/* Weight and gradient pointers of unit u (0 emb, 1..L blocks, L+1 head) for
 * the current moment: full buffers, or the live ZeRO-3 gather / ZeRO-2/3 bucket. */
void *tr_rank_unit_params(tr_rank *r, int64_t u);
void *tr_rank_unit_grads(tr_rank *r, int64_t u);

#endif
