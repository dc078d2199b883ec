/* One training step on one rank, described once: an ordered list of events.
 *
 * A framework profile (profile_*.c) emits the step; two ledgers read it:
 *   - the memory ledger (memory_ledger.c) replays ALLOC/FREE and samples the
 *     live bytes per category at every MOMENT: the timeline, its peak;
 *   - the time ledger (timing.c) prices the work events of every UNIT at the
 *     GPU's achieved rates and walks the critical path: the step time.
 * Nothing else describes a step: no ledger matches labels, none recomputes a
 * shape. docs/architecture.md draws it; docs/method.md derives each event.
 *
 * Memory events say what is live; work events say what runs. A UNIT (the
 * forward of block 3, the loss backward, the optimizer step) holds a body of
 * work events and is booked on the MOMENT before it. Units of the forward, loss
 * and backward phases are one micro-batch's and repeat grad_accum times per
 * step; the reduce and optimizer units happen once per step. Every block of a
 * model has the same shapes, so block i's unit shares block 0's body
 * (est_step_unit_repeat) and a ledger prices it once. */
#ifndef EST_STEP_H
#define EST_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simt.h"
#include "timeline.h"

typedef enum {
    EST_EV_MOMENT,      /* the memory ledger samples live bytes here (a snapshot), or, for a
                           span, opens a row that holds the highest point until the next
                           moment */
    EST_EV_ALLOC,       /* `bytes` of `category` become live: tensor `id` (>= 0) on `stream`,
                           or anonymous bytes (id -1) */
    EST_EV_FREE,        /* `bytes` of `category` are released (tensor `id`, or anonymous);
                           `pending`: the allocator keeps the block in use until the next
                           synchronisation of its stream (record_stream); `use_stream`,
                           when >= 0, the stream whose event it waits on */
    EST_EV_SYNC,        /* the streams catch up: pending frees complete (`stream` -1: every
                           real stream, below EST_STREAM_VIRTUAL; else that stream alone) */
    EST_EV_EMPTY_CACHE, /* torch.cuda.empty_cache(): cached segments are returned */
    EST_EV_UNIT,        /* the work events that follow belong to this unit */
    EST_EV_GEMM,        /* count x (M x K) @ (K x N) in elem_bytes, in `kernels` launches */
    EST_EV_MEMORY_OP,   /* memory-bound device work: `bytes` read + written in `kernels` launches */
    EST_EV_ATTENTION,   /* a fused attention core: `flops` of its forward, operand `bytes` */
    EST_EV_HOST,        /* the framework's own host time: `layer_host_frac` of a block's */
    EST_EV_LANE_COMM,   /* a collective on its own stream beside the unit's compute (ZeRO-3
                           per-module gathers and reduce-scatters): `elems` x elem_bytes among
                           `ranks`; `blocking`: the compute waits for it instead */
    EST_EV_STEP_COMM,   /* the step's gradient collectives: `bytes` each rank sends */
    EST_EV_PCIE,        /* host <-> device copies of CPU offload: `bytes` */
    EST_EV_HOST_MEMORY, /* host-memory-bound work (the CPU optimizer): `bytes` streamed */
    EST_EV_SIMT,        /* a kernel of scalar threads bound by its L1 requests: `sm_cycles`, the
                           wavefronts its busiest SM's L1 serves, one a cycle (work_ftrain_cuda.h) */
    EST_EV_KIND_COUNT
} est_event_kind;

/* The units of work of one step (the time ledger's grouping). */
typedef enum {
    EST_UNIT_EMBED_FWD,
    EST_UNIT_BLOCK_FWD,
    EST_UNIT_HEAD_FWD,  /* final norm, LM head and loss forward */
    EST_UNIT_LOSS_BWD,
    EST_UNIT_HEAD_BWD,
    EST_UNIT_BLOCK_BWD,
    EST_UNIT_EMBED_BWD,
    EST_UNIT_REDUCE,    /* the step's gradient collectives */
    EST_UNIT_OPTIMIZER, /* the optimizer step, on the GPU or on the CPU under offload */
    EST_UNIT_COUNT
} est_unit;

#define EST_UNIT_BIT(u) (1u << (u))
/* The units of one micro-batch, repeated grad_accum times per step. */
#define EST_UNITS_MICROBATCH (EST_UNIT_BIT(EST_UNIT_OPTIMIZER) - 1u - EST_UNIT_BIT(EST_UNIT_REDUCE))

/* How much of the step's collectives compute can hide. */
typedef enum {
    EST_OVERLAP_NONE,         /* all exposed */
    EST_OVERLAP_BACKWARD,     /* behind `windows` micro-batches' backward (bucketed all-reduce,
                                 overlap_comm); `exposed_bytes` can never hide; at least one
                                 bucket of `bucket_bytes` out of `total_bytes` is exposed */
    EST_OVERLAP_MICROBATCHES, /* behind `windows` micro-batches' device time (prefetched) */
    EST_OVERLAP_IN_LANES,     /* already priced as the units' lane collectives (ZeRO-3) */
} est_overlap;

/* Stream ids from here on are no CUDA streams: a seam records a pending free's
 * use on one of them to stand for "the compute stream at this point", and
 * syncs it when the host has waited for that point (FSDP1's rate limiter);
 * an ordinary EST_EV_SYNC leaves them pending. At most 32 of them. */
#define EST_STREAM_VIRTUAL 16
#define EST_STREAM_VIRTUAL_COUNT 32

typedef struct est_event {
    est_event_kind kind;
    union {
        struct { est_phase_kind phase; int32_t layer; bool span; char label[48]; } moment;
        struct { est_category category; int64_t bytes; int32_t id; int8_t stream; bool pending; int8_t use_stream;
                 char name[32]; /* an ALLOC's tensor, when the step keeps names */ } mem;
        struct { size_t ref; } unit; /* the unit is st->units[ref] */
        struct { double M, K, N, elem_bytes, count, kernels; } gemm;
        struct { double bytes, kernels, elems; int32_t cpu_kernel; } op;
        /* cpu_kernel: 0, or which of ftrain's CPU kernels runs it over `elems`
           elements (cpu_device.h, est_cpu_kernel): the CPU device prices it at
           that kernel's measured rate, every other device by its bytes */
        struct { double flops, bytes, kernels; bool backward; } attn;
        struct { double layer_host_frac, ops, extra_ops, waited_ops; bool waits; } host;
        /* ops: the ATen ops the host dispatches for the block (model/host_ops.h);
           0: not counted, the unit's kernels stand for them. extra_ops: ops the
           framework dispatches on top of those (or of the kernels): DeepSpeed's
           hooks and step (frameworks/work_ds_host.h). waits: the host waits for
           the device to run everything issued before the unit (a .item(), a
           Python bool of a device tensor) before it issues the unit's work.
           waited_ops: of extra_ops, those issued before a host sync inside
           the unit (DeepSpeed's step: est_ds_host_waited_ops); the unit's
           device work comes after that sync, so their time adds to it */
        struct { double elems, elem_bytes, ranks, collectives; bool blocking, node_local; } lane;
        /* node_local: tensor parallelism's activation collectives within the node (NVLink,
           else PCIe), `collectives` of them, each waited for by the compute */
        struct { double bytes, exposed_bytes, windows, bucket_bytes, total_bytes;
                 est_overlap overlap; } comm;
        struct { double bytes; } transfer; /* PCIE and HOST_MEMORY */
        struct { est_row_kernel kernel; double kernels; } simt; /* priced on the card (simt.h) */
    } u;
} est_event;

/* A unit of work. The units sit in a compact array of their own, which the
 * UNIT events index, so that a ledger pricing the same step many times
 * (ftest fit) walks the units alone. */
typedef struct est_unit_ref {
    est_unit unit;
    int32_t layer;
    size_t body, body_len; /* its work events: st->work[body .. body + body_len) */
    size_t moment;         /* the index of the moment it is booked on */
} est_unit_ref;

typedef struct est_step {
    est_event *events;           /* moments, memory events and units, in order */
    size_t count, capacity;
    est_event *work;             /* the units' bodies of work events */
    size_t work_count, work_capacity;
    size_t last_body[EST_UNIT_COUNT], last_body_len[EST_UNIT_COUNT]; /* per unit kind */
    bool unit_open;              /* work events go to the body of the last unit */
    est_unit_ref *units;         /* the units, in order */
    size_t unit_count, unit_capacity;
    size_t moments;              /* MOMENT events so far */
    int64_t live[EST_CAT_COUNT]; /* live bytes after the last event (while building) */
    /* What the memory ledger's timeline will say of its peak, known while building (a
     * search that needs only the peak skips the ledger): the allocator-visible live
     * bytes now, the highest point a row of the timeline holds (a moment's bytes, or a
     * span's highest point while it is open), and whether a span is open. */
    int64_t allocated_now;
    int64_t peak_allocated_bytes;
    bool span_open;
    /* Tensors: each ALLOC with an id is one tensor; its category and bytes
     * are kept so that its FREE can say them again. */
    int8_t *tensor_cat;
    int64_t *tensor_bytes;
    int8_t *tensor_stream;
    int32_t tensor_count, tensor_capacity;
    int64_t cpu_bytes;           /* host RAM this rank needs while training */
    int64_t cpu_load_bytes;      /* host RAM this rank needs while loading the model */
    int64_t rank_spread_bytes;   /* how much less the smallest rank may hold at every moment */
    bool oom;                    /* an append failed; the step is incomplete */
    bool quiet;                  /* memory events only: no moments, units or work (a warm-up
                                    step before the one the timeline shows) */
    bool keep_names;             /* ALLOC events keep their tensors' names (a debugging aid:
                                    nothing in ftest reads them, and copying a name into each
                                    of a step's tens of thousands of events costs); kept by
                                    est_step_clear */
    int64_t stop_above_bytes;    /* > 0: once the allocated peak passes this the build stops
                                    (stopped and oom set, no event is added after): a search
                                    that only asks whether the step could fit any card
                                    (plan_memo.c) needs no more; kept by est_step_clear */
    bool stopped;                /* the build stopped there: peak_allocated_bytes is above
                                    stop_above_bytes, the rest is incomplete */
    int32_t cublas_rows[2];      /* 1 + the timeline row from which the forward's / the
                                    backward thread's cuBLAS workspace is live; 0: not booked
                                    (frameworks/autograd.c; check_trace.c) */
} est_step;

void est_step_init(est_step *st);
void est_step_free(est_step *st);
void est_step_clear(est_step *st);

/* Appends an event (a work event to the open unit's body); on allocation
 * failure sets st->oom and returns NULL. */
est_event *est_step_add(est_step *st, est_event_kind kind);

/* The memory events that take the live bytes to `live`, then a moment. */
void est_step_moment(est_step *st, est_phase_kind phase, int32_t layer, const char *label,
                     const int64_t live[EST_CAT_COUNT]);

/* `bytes` of `cat` become live / are released (no moment). */
void est_step_alloc(est_step *st, est_category cat, int64_t bytes);
void est_step_free_bytes(est_step *st, est_category cat, int64_t bytes);

/* A tensor of `bytes` and `cat` named `name` becomes live on `stream` (0: the
 * compute stream); returns its id, or -1 when out of memory (st->oom). */
int32_t est_step_tensor(est_step *st, est_category cat, int64_t bytes, const char *name,
                        int stream);
/* Tensor `id` is freed; `pending`: through record_stream on another stream, so
 * the allocator holds its block until that stream's next EST_EV_SYNC. */
void est_step_tensor_free(est_step *st, int32_t id, bool pending);
/* Tensor `id` is freed through record_stream on `use_stream` (a virtual
 * stream, EST_STREAM_VIRTUAL on): its block waits for that stream's sync. */
void est_step_tensor_free_on(est_step *st, int32_t id, int use_stream);
/* Bytes of tensor `id`. */
int64_t est_step_tensor_bytes(const est_step *st, int32_t id);
/* Opens a row of the timeline that holds the highest point reached until the
 * next moment (the tensor-level profiles sample this way; est_step_moment is a
 * snapshot). */
void est_step_span(est_step *st, est_phase_kind phase, int32_t layer, const char *label);
/* Side streams catch up (pending frees complete), and empty_cache(). */
void est_step_sync(est_step *st);
/* One stream catches up (a virtual one: the host waited for that point). */
void est_step_sync_stream(est_step *st, int stream);
void est_step_empty_cache(est_step *st);

/* Opens a unit: the work events until est_step_unit_end are its body. */
void est_step_unit(est_step *st, est_unit unit, int32_t layer);
/* Closes the open unit. */
void est_step_unit_end(est_step *st);
/* A unit that does exactly the work of the previous unit of its kind (one
 * more block of the same shapes): it shares that body. False when there is
 * none yet; then emit the work. */
bool est_step_unit_repeat(est_step *st, est_unit unit, int32_t layer);

/* Work events. */
void est_step_gemm(est_step *st, double M, double K, double N, double elem_bytes, double count,
                   double kernels);
void est_step_memory_op(est_step *st, double bytes, double kernels);
/* A memory op that one of ftrain's CPU kernels runs over `elems` elements. */
void est_step_kernel_op(est_step *st, int32_t cpu_kernel, double elems, double bytes);

extern const char *const est_unit_names[EST_UNIT_COUNT]; /* "embedding_forward", ... */

#endif
