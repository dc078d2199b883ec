/* The op-level parity harness: every op of two backends on the same inputs.
 *
 * Inputs are made on the host, uploaded to each backend through its own
 * memory and conversion calls, the op runs on each, and its outputs come back
 * in fp32 and are compared elementwise:
 *     |a - b| <= abs + rel * max(|a|, |b|)      (NaN or inf always fails)
 * A backward op gets the same saved tensors on both sides (the first
 * backend's forward outputs), so a failure names one op, not a chain.
 *
 * Used by tests/trainer_backend_parity.c (CPU backend against the naive
 * reference backend below, and finite differences through a backend's own
 * forward ops) and by the GPU harness of `make test-gpu` (CUDA against CPU). */
#ifndef TR_PARITY_H
#define TR_PARITY_H

#include <stddef.h>

#include "backend.h"

typedef struct tr_parity_tol {
    double abs, rel;
} tr_parity_tol;

typedef struct tr_parity_result {
    int ops;            /* ops run */
    int64_t compared;   /* elements compared */
    double worst;       /* largest |a-b| / (abs + rel*max(|a|,|b|)); <= 1 passes */
    char worst_at[96];  /* op and output of the worst element */
    char fail[512];     /* the first failure, empty when all passed */
} tr_parity_result;

/* Runs every op of a and b on the same inputs in dtype dt. 0 when every
 * output agrees within tol, else -1 with the first disagreement in res->fail. */
int tr_parity_run(const tr_backend *a, const tr_backend *b, tr_dtype dt, tr_parity_tol tol, tr_parity_result *res);

/* Checks each backward op of `be` (fp32) against central finite differences of
 * its own forward op along random directions. 0 on success, else -1. */
int tr_parity_fd(const tr_backend *be, tr_parity_result *res);

/* A backend of naive ops on the host: double accumulation written from the
 * equations in ops.h and optim.h, the hand-written matmul and row-by-row flash
 * attention of the CPU backend (tr_cpu_*_ref), and its eager attention, which
 * has no separate reference (tests/trainer_ops.c checks it by finite
 * differences, and this harness checks flash against eager). */
const tr_backend *tr_parity_reference_backend(void);

#endif
