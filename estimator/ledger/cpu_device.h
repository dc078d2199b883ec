/* The CPU as a device of the time ledger: ftrain's CPU backend (its pool of
 * threads, OpenBLAS sgemm for fp32 linears, its own kernels for bf16) priced
 * at rates MEASURED on the machine at hand, never typed in. The rates come
 * from calibrate/host/cpu-ftrain.json, written by `make cpu-profile`
 * (calibrate/host/ftrain_ops_bench.c --profile): the median GEMM rate per
 * dtype over the tiny models' step shapes, the rate of a memory-bound op on
 * tensors of their size, and the cost of one dispatch of ftrain's pool.
 * docs/method.md ("ftrain's CPU step") has the equations. */
#ifndef EST_CPU_DEVICE_H
#define EST_CPU_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "events.h"
#include "run.h"

enum { EST_CPU_SEQS = 4 };  /* sequence lengths the attention rates are measured at */
enum { EST_CPU_WORKS = 4 }; /* work intervals the barrier meetings are measured after */

/* ftrain's CPU kernels that are not GEMMs or attention, each timed by the
 * profile in elements per second (its "kernel_elems_per_s"): a memory op of
 * the step tagged with one of them (est_step_kernel_op) is priced at that
 * kernel's rate. Elements: rows x width for the row ops (norms: n x h; rope:
 * tokens x (nh + nkv) x hd rotated; swiglu: n x I outputs; add, embedding:
 * n x h; loss: n x V logits), parameters for the optimizer's passes, bytes
 * for zeroing. */
typedef enum {
    EST_CPU_K_NONE,
    EST_CPU_K_RMSNORM_FWD, EST_CPU_K_RMSNORM_BWD, EST_CPU_K_ROPE_FWD, EST_CPU_K_ROPE_BWD,
    EST_CPU_K_SWIGLU_FWD, EST_CPU_K_SWIGLU_BWD, EST_CPU_K_ADD, EST_CPU_K_EMBED_FWD, EST_CPU_K_EMBED_BWD,
    EST_CPU_K_CE_FWD, EST_CPU_K_CE_BWD, EST_CPU_K_SUMSQ, EST_CPU_K_ZERO, EST_CPU_K_ADAMW, EST_CPU_K_SGD,
    EST_CPU_K_CONVERT,
    EST_CPU_KERNELS
} est_cpu_kernel;

/* The profile's name of each kernel ("rmsnorm_fwd", ...; [0] is NULL). */
extern const char *const est_cpu_kernel_names[EST_CPU_KERNELS];

typedef struct est_cpu_device {
    double gemm_fp32_flops_per_s; /* ftrain's fp32 linear (sgemm in 128-column slices) */
    double gemm_bf16_flops_per_s; /* ftrain's bf16 linear (its own kernels) */
    double memory_bytes_per_s;    /* y += x over tensors of the tiny models' size */
    double op_dispatch_s;         /* one tr_par_for: waking and joining the pool */
    double threads;               /* cores the rates were measured on (ftrain's pool size) */
    double gemm_fp32_flops_per_s_1t, gemm_bf16_flops_per_s_1t, memory_bytes_per_s_1t;
                                  /* the same with a team of one thread: each rank's team
                                     when ranks >= threads (threads_per_rank = threads / ranks) */
    /* ftrain's attention at the tiny models' shapes (head dim 8), per dtype
     * ([0] fp32, [1] bf16) and per sequence length seq[i]: flash forward FLOPs
     * (causal 4 B T^2 q / 2) per second of its forward and of its backward;
     * eager: the ledger's FLOPs of its batched products (work.c: 12 B T^2 q
     * forward and backward) per second of its forward and backward. */
    double seq[EST_CPU_SEQS];
    double attn_fwd_flops_per_s[2][EST_CPU_SEQS], attn_bwd_flops_per_s[2][EST_CPU_SEQS];
    double eager_flops_per_s[2][EST_CPU_SEQS];
    double meet_work_s[EST_CPU_WORKS];   /* work each thread did before a meeting (0-100 us) */
    double meet_s[9][EST_CPU_WORKS];     /* [n][w]: one meeting of n threads at a pthread
                                            barrier after meet_work_s[w] of work, n = 2..8,
                                            timed with the vCPUs kept busy */
    double halt_wake_s;                  /* what a meeting adds when its sleeper's vCPU
                                            halted: the wake-up from a halt less one on a
                                            busy core (calibrate/host/ftrain_wake.c) */
    double kernel_elems_per_s[EST_CPU_KERNELS][2]; /* [k][0] fp32, [k][1] bf16 (est_cpu_kernel) */
    char source[160];             /* the profile and its date */
} est_cpu_device;

/* True when `run` runs on ftrain's CPU backend (the record's device "cpu"). */
bool est_cpu_device_run(const est_run *run);

/* Parses a profile's text (schema ftest.cpu-device/1); 0, or -1 with a message. */
int est_cpu_device_parse(const char *text, size_t len, est_cpu_device *out, char *err,
                         size_t errlen);

/* The device of this machine's committed profile, read once; NULL when the
 * profile is absent or invalid (the time is then not modelled). */
const est_cpu_device *est_cpu_device_get(void);

/* The device as one rank of `ranks` sees it: a team of threads / ranks
 * threads (trainer/train.c), so the one-thread rates once that is one. */
est_cpu_device est_cpu_device_team(const est_cpu_device *d, int64_t ranks);

/* How many times longer a rank's op takes when all `ranks` threads of ftrain's
 * in-process communicator run the same op on the device's cores at once:
 * max(1, ranks / threads). */
double est_cpu_rank_share(const est_cpu_device *d, double ranks);

/* The synchronisation of one optimizer step of ftrain's in-process
 * communicator (trainer/comm/comm_threads.c): every collective meets all ranks
 * at a barrier, twice (all-reduce three times), and the driver meets them
 * twice per step; 0 for one rank. The collectives per step follow
 * docs/trainer.md ("Ranks and ZeRO"). A meeting costs what the profile
 * measured after the work a rank does between two meetings: `compute_s` (one
 * rank's priced step without them, on the shared cores) over the meetings,
 * less the cores' sharing, linear between the measured intervals; plus one
 * wake-up from a halted vCPU (halt_wake_s): glibc's barrier sleeps at once
 * (nptl/pthread_barrier_wait.c, 2.36: futex_wait_simple, no spinning), and on
 * a machine with nothing else to run the sleeper's vCPU halts (for ranks
 * outnumbering the cores, assumed: the last rank still working runs alone at
 * the end of each meeting's interval, so one vCPU halts then). */
double est_cpu_sync_s(const est_cpu_device *d, const est_run *run, double compute_s);

/* Seconds of one work event of a rank on the CPU device (0 for events the CPU
 * does not run: the collectives of the in-process communicator are memory
 * copies priced as such); adds its FLOPs and bytes. `fp32` picks the
 * attention kernels' rate (fp32 flash on sgemm tiles, else the bf16 kernels)
 * at the run's sequence length `seq`;
 * `bwd_ratio` is the attention backward's FLOPs over its forward's (for the
 * FLOP count only: the backward's time is measured against the forward's FLOPs).
 * A batched GEMM (more products than launches) is eager attention's per-head
 * products: priced at the measured eager rate. A memory op tagged with one of
 * ftrain's kernels takes its elements over that kernel's measured rate (`fp32`
 * picks the dtype); an untagged one its bytes over the y += x rate. */
double est_cpu_event_s(const est_cpu_device *d, const est_event *e, bool fp32, double seq,
                       double bwd_ratio, double *flops, double *bytes);

/* The rate of series `r` (EST_CPU_SEQS values at d->seq) at sequence `seq`:
 * interpolated in log-log between the measured lengths, the end value beyond. */
double est_cpu_rate_at(const est_cpu_device *d, const double *r, double seq);

#endif
