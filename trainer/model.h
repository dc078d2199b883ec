/* One rank's life: its creation (every buffer of rank.h planned and the
 * persistent ones acquired), its weights, and the forward/backward of a
 * micro-batch, which calls step.c and zero.c in the order of the memory timeline.
 *
 * Every buffer is planned from tr_sizes and lives in one slab per category
 * (arena.h). Lifetimes follow the event list of docs/trainer.md ("Memory
 * timeline"); the estimator's ftrain profile replays that list by its own
 * equations, so any change here must change the document and the profile. */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "init.h"
#include "rank.h"

/* Plans both arenas; when their slabs together exceed budget_bytes (the
 * memory this rank may use) it stops there as out of memory, otherwise it
 * commits them and acquires the persistent buffers under "init".
 * 0, or -1 with a message (out of memory: *oom set). */
int tr_rank_create(tr_rank *r, const tr_config *cfg, const tr_backend *be, tr_comm *comm, int rank,
                   int64_t budget_bytes, bool *oom, char *err, size_t errlen);
void tr_rank_destroy(tr_rank *r);

/* Fills this rank's weights (compute copy and fp32 copy) from the initializer. */
void tr_rank_init_weights(tr_rank *r, const tr_init *in);

/* Forward, loss and backward of one micro-batch whose tokens and targets are
 * in r->host_batch. Gradients accumulate (scaled by loss_scale per token);
 * ZeRO-2/3 reduce them into the shard as each unit finishes. Returns the mean
 * loss over the micro-batch's tokens. */
double tr_rank_micro_batch(tr_rank *r, float loss_scale);

/* Phase labels ("forward layer 3"), shared by the arena and the docs. */
void tr_phase_label(char *buf, size_t n, const char *what, int64_t layer);

#endif
