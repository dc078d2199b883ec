/* The step of a PyTorch-based framework as autograd runs it, tensor by
 * tensor: the embedding, every decoder block and the head go forward op by
 * op (estimator/model/block.h), each op's outputs becoming live and each
 * tensor freed when the forward no longer reads it and no backward node keeps
 * it; then backward op by op in reverse, each gradient born at the backward
 * of its tensor's last reader and freed at its producer's; the weights'
 * gradients are handed to the framework as they appear. The framework (a
 * seam, seam.h) adds what it keeps: resident states, gathered parameters,
 * buckets, its optimizer step. Everything becomes the step's events
 * (estimator/ledger/events.h), which the two ledgers read. */
#ifndef EST_AUTOGRAD_H
#define EST_AUTOGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "constants.h"
#include "events.h"
#include "run.h"

struct est_seam;
struct est_objective;

/* Module instances: the embedding is 0, block i is i + 1, the head is L + 1. */
#define EST_INST_EMBED 0

typedef struct est_sim {
    est_step *st;
    const est_run *run;
    const est_constants *k;
    const struct est_seam *seam;
    void *fw;                     /* the framework's own state */
    est_regime regime;            /* the blocks' dtypes */
    est_regime ends_regime;       /* the embedding's and head's */
    est_module embed, block, block_nograd, head;
    int64_t L;                    /* blocks */
    bool ckpt;                    /* some block is checkpointed (est_run_block_checkpointed) */
    bool sac;                     /* op-level selective: the checkpointed blocks keep the
                                     policy's outputs (sac.h) */
    bool sac_store, sac_take;     /* a checkpointed block's first forward stores them; its
                                     recompute takes them */
    int32_t *sac_kept;            /* per block, op and output (2): the stored tensor, or -1 */
    bool no_grad_forward;         /* a checkpointed block's first forward is running */
    bool first_step;              /* the warm-up step: lazily made state appears in it */
    bool fwd_cublas, bwd_cublas;  /* the forward's / the backward thread's cuBLAS workspace
                                     exists (autograd.c cublas_workspace) */
    bool recompute;               /* a checkpointed block's forward runs again in backward
                                     (outside save_on_cpu's hooks, which wrap the forward) */
    int32_t *ids;                 /* per module instance: its tensors' step ids */
    int32_t *grads;               /* the same for their gradients (one instance at a time) */
    int32_t *refs;                /* references per step tensor id */
    int32_t refs_capacity;
    int32_t carried;              /* the hidden states passing between modules */
    int32_t carried_grad;         /* their gradient in backward */
    int32_t shared[EST_SHARED_COUNT]; /* what the embedding made for every block: the
                                     attention mask, RoPE's cos/sin (module_graph.h) */
    int32_t *ckpt_inputs;         /* per block: the input a checkpoint keeps */
    int32_t *cache;               /* autocast's weight cache: released when the region exits */
    int32_t cache_count, cache_capacity;
    est_run *own_run;             /* the run as the policy model sees it (a preference step's
                                     paired rows; `run` points here), or NULL */
    const struct est_objective *objective; /* a preference step's passes (rl.c), or NULL */
    void *obj_state;              /* the objective's own state */
    bool detached;                /* a forward outside the step's graph runs: no seam hooks */
    int32_t stash[16];            /* offloaded tensors whose device copies are kept (run's
                                     offload_stash), oldest first */
    int stash_count;
    est_module *variants;         /* partial training (trainable.h): per distinct trainable set of
                                     the blocks, the block and its no_grad twin; NULL otherwise */
    int32_t *layer_variant;       /* per block: its variant; NULL: every block is `block` */
    char *err;
    size_t errlen;
} est_sim;

/* Prepares the three modules and the bookkeeping for `run`. */
int est_sim_init(est_sim *s, const est_run *run, const est_constants *k,
                 const struct est_seam *seam, void *fw, est_step *st, char *err, size_t errlen);
void est_sim_free(est_sim *s);

/* A framework behind one seam: what it adds to autograd's step
 * (autograd.h). Each hook may be NULL. A framework's file fills one
 * est_seam; the registry (step_build.c) picks it by the run's framework.
 *
 * Order of calls in one step: init (loading, wrapping, the optimizer's
 * states) once; then per micro-batch, for every module instance (embedding,
 * blocks, head) module_pre, op_pre/op_post around each op, module_post, going
 * forward and then backward (backward = true), with grad for each weight
 * gradient as autograd makes it; then finish (the reduction and the optimizer
 * step) once. */
typedef struct est_seam {
    const char *name;
    /* The dtypes the modeling code runs in: the blocks', and the embedding's
     * and head's (they differ under QLoRA). */
    void (*regime)(const est_run *run, est_regime *block, est_regime *ends);
    int (*init)(est_sim *s);
    void (*module_pre)(est_sim *s, int inst, bool backward);
    void (*module_post)(est_sim *s, int inst, bool backward);
    void (*op_pre)(est_sim *s, int inst, int op, bool backward);
    void (*op_post)(est_sim *s, int inst, int op, bool backward);
    /* Parameter p of instance inst has a new gradient, tensor `grad` (one
     * reference, now the framework's). */
    void (*grad)(est_sim *s, int inst, int p, int32_t grad);
    /* After the last micro-batch: the reduction and the optimizer step. */
    int (*finish)(est_sim *s);
} est_seam;


/* A training objective's additions to autograd's step (estimator/frameworks/
 * rl.c): forwards outside the step's graph, each under torch.no_grad (a
 * preference step's reference model, KTO's KL pass). A seam that supports
 * the objective sets s->objective after est_sim_init. Each hook may be NULL. */
typedef struct est_objective {
    int (*init)(est_sim *s);            /* after the seam's init: its modules, resident weights */
    void (*before_forward)(est_sim *s); /* a micro-batch starts */
    void (*after_head)(est_sim *s);     /* the head's forward ran; its held outputs still live */
    void (*free)(est_sim *s);
} est_objective;

/* A no_grad forward of module `m` outside the step's graph (scratch
 * instance, no seam hooks): `input` (its one reference is consumed) in, the
 * output (one reference) returned. An embedding sets s->shared. */
int32_t est_sim_detached_forward(est_sim *s, const est_module *m, int32_t input);

/* The forward's references on what the embedding made for every block
 * (s->shared) end. */
void est_sim_release_shared(est_sim *s);

/* autocast's region exits: its cached weight casts go. */
void est_sim_cache_exit(est_sim *s);

/* A whole run as the timeline shows it: the seam's init, a first optimizer
 * step (its memory only, one row: what PyTorch and the frameworks make
 * lazily at the first step, and the allocator's cache, carry over), then the
 * step the timeline shows, micro-batch and the seam's finish. */
int est_sim_run(est_sim *s);

/* One micro-batch: forward through every module, the loss, backward through
 * every module (with a span per module and its unit of work). */
int est_sim_microbatch(est_sim *s);

/* A new tensor with one reference, and references taken and dropped (the
 * tensor is freed with its last). `pending`: freed through record_stream. */
int32_t est_sim_alloc(est_sim *s, est_category cat, int64_t bytes, const char *name, int stream);
void est_sim_ref(est_sim *s, int32_t id);
void est_sim_release(est_sim *s, int32_t id);
void est_sim_release_pending(est_sim *s, int32_t id);
/* Its last reference dropped through record_stream on `use_stream` (events.h
 * est_step_tensor_free_on). */
void est_sim_release_on(est_sim *s, int32_t id, int use_stream);

/* The module of an instance, and the instance of block i. */
const est_module *est_sim_module(const est_sim *s, int inst);
static inline int est_sim_block_inst(int64_t layer) { return (int)layer + 1; }

#endif
