/* `ftest calibrate`'s grid: the options that span it, the points it plans and
 * the key that names each point in the records it writes (so a rerun skips
 * what is done). */
#ifndef CAL_GRID_H
#define CAL_GRID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run.h"

#define CAL_MAX_VALUES 64
#define CAL_MAX_MODELS 8
#define CAL_MAX_POINTS 100000
#define CAL_KEY_MAX 512

typedef struct cal_grid {
    char models[CAL_MAX_MODELS][256];  /* names or config.json paths */
    int nmodels;
    int64_t seqs[CAL_MAX_VALUES];
    int nseqs;
    int64_t batches[CAL_MAX_VALUES];
    int nbatches;
    est_checkpointing ckpts[3];
    int nckpts;
    int zeros[4];
    int nzeros;
    est_precision precisions[4];
    int nprecisions;
    int64_t world;                     /* ftrain --ranks; a probe's --world */
    int64_t emulated[CAL_MAX_VALUES];  /* probe: the ranks of `world` to emulate */
    int nemulated;
    int64_t layers;                    /* --layers K: depths K/2 and K; 0 = full depth */
    char runner[160];                  /* "ftrain", or "probe:MODE" and the probe's settings
                                          that make a different run (gpu, offload, attention,
                                          zero.Init): the start of every key */
} cal_grid;

typedef struct cal_point {
    char model[256];
    int64_t seq, batch, layers;        /* layers 0 = the model's full depth */
    est_checkpointing ckpt;
    int zero;
    est_precision precision;
    int64_t world, rank;               /* rank: the emulated rank (probes), 0 for ftrain */
    char key[CAL_KEY_MAX];
} cal_point;

/* Parses "A,B,C" or "START:STOP[:STEP]" into whole numbers in [min, max].
 * Returns the count, or -1 with one line in err. */
int cal_parse_int_list(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                       int cap, char *err, size_t errlen);

/* The key of a point: every field that makes it a different run, as text. */
void cal_point_key(const char *runner, cal_point *p);

/* Plans the grid: models x precisions x zero x checkpointing x seq x batch x
 * emulated ranks x depths (the shallow depth first, so its record exists when
 * the deep one is extrapolated). Fills up to `cap` points (out may be NULL when
 * cap is 0) and returns how many the grid has. */
size_t cal_grid_plan(const cal_grid *g, cal_point *out, size_t cap);

/* The two depths of --layers K: K/2 (at least 1) and K. */
int64_t cal_shallow_depth(int64_t k);

#endif
