/* Sequences of many lengths (--seq-lengths FILE): a dataset's sample lengths
 * in tokens, and what they make of a run's batches under dynamic padding.
 *
 * A padding collator pads each batch to its longest sample. The memory peak is
 * set by the longest batch (micro-batch x the longest sample, truncated at
 * --seq), the step time by the mean padded length (docs/method.md, "Sequences
 * of many lengths"):
 *  - random batches (the Trainer's default sampler): E[max of b samples drawn
 *    from the lengths] = sum over lengths l of l (F(l)^b - F(l-1)^b), F the
 *    cumulative share of samples up to l;
 *  - sorted batches (group_by_length, PEFT's BucketIterator): the samples
 *    sorted by length and cut into consecutive groups of b; the mean of each
 *    group's longest (a bucket of many batches sorted within is close to it).
 *
 * The file: one sample per line ("LENGTH"), or a histogram line ("LENGTH
 * COUNT"); '#' starts a comment; blank lines are skipped. */
#ifndef EST_SEQ_LENGTHS_H
#define EST_SEQ_LENGTHS_H

#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* The lengths as a histogram, lengths ascending and distinct. */
typedef struct est_seq_hist {
    int64_t *length, *count;
    size_t n, cap;
    int64_t samples;         /* sum of the counts */
} est_seq_hist;

#define EST_SEQ_LENGTHS_MAX_BYTES ((size_t)256 << 20) /* a file larger is refused */
#define EST_SEQ_MAX_SAMPLES ((int64_t)1 << 40)

void est_seq_hist_free(est_seq_hist *h);

/* Parses text[0, len) into h (empty on entry). 0, or -1 with one line naming
 * the line number. */
int est_seq_lengths_parse(const char *text, size_t len, est_seq_hist *h, char *err, size_t errlen);

/* Reads and parses a file (a regular file of at most EST_SEQ_LENGTHS_MAX_BYTES). */
int est_seq_lengths_load(const char *path, est_seq_hist *h, char *err, size_t errlen);

/* The longest sample, truncated at `truncate` (0: none). */
int64_t est_seq_longest(const est_seq_hist *h, int64_t truncate);

/* The mean padded length of a batch of `batch` samples, each truncated at
 * `truncate` (0: none). */
double est_seq_padded_mean(const est_seq_hist *h, int64_t batch, est_batching how, int64_t truncate);

#endif
