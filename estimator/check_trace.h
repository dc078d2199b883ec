/* `ftest check` on cpu-trace records (calibrate/probes/cpu_truth.py,
 * docs/records.md): the estimate compared like with like with a trace of
 * the framework's own tensors on the CPU. A trace holds no CUDA context, no
 * allocator reserve and no library workspace, so the estimate's allocated
 * bytes at each moment are taken less its cuBLAS workspace (the CUDA-only
 * part of the workspace category) and ZeRO-3's pending stream-ordered frees
 * (one process, no streams); per rank, per phase and per decoder layer
 * (after its forward; its backward at its fullest) where the record has
 * them, and the phase of the peak. */
#ifndef EST_CHECK_TRACE_H
#define EST_CHECK_TRACE_H

#include <stdint.h>

#include "estimate.h"
#include "record.h"

typedef struct est_trace_compare {
    int64_t traced_bytes;          /* the rank's traced peak */
    int64_t estimated_bytes;       /* the estimate's peak of what a trace can hold */
    int64_t unseen_bytes;          /* subtracted at that moment: cuBLAS workspace, pending frees */
    double rel;                    /* (estimated - traced) / traced */
    int traced_phase;              /* index into est_trace_phase_names; -1 unknown */
    int estimated_phase;           /* the phase of the estimate's moment of that peak */
    double phase_rel[4];           /* per phase (EST_TRACE_PHASES); NAN where not compared */
    int boundaries;                /* layer moments compared */
    double boundary_worst_rel;     /* the largest-magnitude signed error among them */
} est_trace_compare;

/* The trace phase (index into est_trace_phase_names) of an estimated moment:
 * the loss's forward counts as forward, its backward and the gradient
 * reduction as backward (where the frameworks run them: in backward hooks). */
int est_trace_phase_of(const est_phase *p);

/* Bytes of moment p a trace can see: allocated, less the cuBLAS workspace the
 * profiles keep in the workspace category (e->k.s cublas_workspace_bytes, as many as are live: est_step.cublas_rows) and
 * ZeRO-3's pending stream-ordered frees (e->rank_spread_bytes, at most the
 * moment's comm bytes). */
int64_t est_trace_visible_bytes(const est_phase *p, const est_estimate *e, int64_t *unseen);

/* Compares one traced rank with the estimate. */
void est_trace_compare_rank(const est_rank_measure *m, const est_estimate *e, est_trace_compare *out);

/* The index of a phase name ("forward"), or -1. */
int est_trace_phase_index(const char *name);

#endif
