/* The memory arena: exact accounting of every byte by category.
 *
 * Buffers are planned first (sizes.c gives every size), then each category
 * gets one slab (llm.c: one allocation per memory class) and every buffer a
 * fixed offset in it. During the step a buffer is acquired when it comes to
 * life and released when it dies; the arena counts live bytes per category and
 * in total, keeps each category's peak, the total's peak, the breakdown at the
 * moment of that peak and the phase label it happened in. A GPU caching
 * allocator reports the same two figures: live bytes are "allocated", slab
 * capacities are "reserved".
 *
 * Acquiring a live buffer or releasing a dead one is a programming error and
 * aborts with file and line. */
#ifndef TR_ARENA_H
#define TR_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exactly the allocator categories of the estimator (est_category_names). */
typedef enum {
    TR_CAT_PARAMS,
    TR_CAT_MASTER,
    TR_CAT_GRADS,
    TR_CAT_OPTIMIZER,
    TR_CAT_ACTIVATIONS,
    TR_CAT_LOGITS,
    TR_CAT_COMM,
    TR_CAT_WORKSPACE,
    TR_CAT_COUNT
} tr_category;

extern const char *const tr_category_names[TR_CAT_COUNT];

#define TR_LABEL_MAX 48

typedef struct tr_buf {
    void *ptr;          /* into its category's slab; NULL before commit or when absent */
    int64_t bytes;      /* accounted size; 0 means the buffer does not exist in this run */
    int64_t offset;     /* byte offset in the slab (a multiple of 64) */
    tr_category cat;
    bool live;
    const char *name;   /* as in docs/trainer.md's tables (for a debugger; nothing prints it) */
} tr_buf;

/* How slabs are obtained: the backend's device memory, or host memory. */
typedef struct tr_mem {
    void *(*alloc)(size_t bytes);  /* zeroed, 16-byte aligned or better; NULL when out of memory */
    void (*free)(void *p);
} tr_mem;

typedef struct tr_arena {
    const char *space;                  /* "device" or "host", for messages */
    const tr_mem *mem;
    unsigned char *slab[TR_CAT_COUNT];
    int64_t capacity[TR_CAT_COUNT];     /* planned slab bytes (reserved) */
    tr_buf **bufs;                      /* every planned buffer */
    size_t nbufs, capbufs;
    bool committed;
    int64_t live[TR_CAT_COUNT];         /* bytes live now */
    int64_t peak[TR_CAT_COUNT];         /* each category's own maximum */
    int64_t at_peak[TR_CAT_COUNT];      /* breakdown when the total peaked (first time) */
    int64_t live_total, peak_total;
    char phase[TR_LABEL_MAX];           /* label of the current phase */
    char peak_phase[TR_LABEL_MAX];      /* label when the total peaked */
} tr_arena;

#define TR_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond)) tr_assert_fail(__FILE__, __LINE__, #cond);                           \
    } while (0)
_Noreturn void tr_assert_fail(const char *file, int line, const char *what);

void tr_arena_init(tr_arena *a, const char *space, const tr_mem *mem);
/* Registers a buffer of `bytes` (0 = absent). 0, or -1 when out of memory. */
int tr_arena_plan(tr_arena *a, tr_buf *b, tr_category cat, int64_t bytes, const char *name);
/* One slab per category, pointers for every planned buffer. 0, or -1 with a message. */
int tr_arena_commit(tr_arena *a, char *err, size_t errlen);
void tr_arena_free(tr_arena *a);

void tr_arena_phase(tr_arena *a, const char *label);
void tr_arena_acquire(tr_arena *a, tr_buf *b);
void tr_arena_release(tr_arena *a, tr_buf *b);
/* Acquire / release a group of buffers (a slot); absent ones are skipped. */
void tr_arena_acquire_n(tr_arena *a, tr_buf *const *bufs, int n);
void tr_arena_release_n(tr_arena *a, tr_buf *const *bufs, int n);

int64_t tr_arena_reserved(const tr_arena *a);

/* Host memory (calloc-backed: zeroed, aligned): the CPU backend's slabs. */
void *tr_host_alloc(size_t bytes);
void tr_host_free(void *p);

#endif
