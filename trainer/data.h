/* Training data: a seeded synthetic task or a binary token file.
 *
 * Synthetic: a random permutation pi of the vocabulary (from the seed); each
 * sequence starts at a random token (from seed and sample index) and follows
 * x_{t+1} = pi(x_t). Every target is a fixed function of the current token, so
 * a model can drive the loss toward zero: a learnable task for tests.
 *
 * Token file (docs/trainer.md): 16-byte header "FTRAINTK", uint32 version 1,
 * uint32 bytes per token (2 or 4), then the tokens, all little-endian. Sample g
 * is the window of T+1 tokens starting at (g*T) mod (count - T). The file is
 * read a window at a time (pread), never mapped or read whole: a file that is
 * truncated under a run gives an error, not SIGBUS, and an 8 GiB file costs
 * what the run reads of it.
 *
 * Sample g of the global stream goes to rank r, micro-batch m, row b of step s
 * as g = ((s*A + m)*N + r)*B + b, so N ranks see exactly the sequences that one
 * rank with batch N*B would. */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#define TR_TOKEN_MAGIC "FTRAINTK"
#define TR_TOKEN_HEADER 16

typedef struct tr_data {
    int64_t V;
    uint64_t seed;
    int32_t *perm;              /* synthetic: (V) the next-token rule */
    int fd;                     /* file: open read-only; -1 for synthetic */
    char path[1024];            /* file: for messages */
    int64_t count;              /* file: tokens */
    int bpt;                    /* file: bytes per token */
} tr_data;

/* path "" or NULL: synthetic. A file is checked before training: its header
 * and length, at least T+1 tokens, and every token of the windows of samples
 * 0 .. samples-1 (those a run of that many samples reads; the whole file when
 * they cover it) below V. samples < 0: every token. 0, or -1 with a message. */
int tr_data_open(tr_data *d, const char *path, int64_t V, int64_t T, int64_t samples, uint64_t seed,
                 char *err, size_t errlen);
void tr_data_close(tr_data *d);

/* inputs = sample[0..T), targets = sample[1..T]. 0, or -1 with a message when
 * the file no longer holds the window (truncated) or a token is not below V
 * (changed under the run). */
int tr_data_sample(const tr_data *d, int64_t g, int64_t T, int32_t *inputs, int32_t *targets, char *err,
                   size_t errlen);

/* Writes a token file (tests and users). 0, or -1 with a message. */
int tr_data_write(const char *path, const int32_t *tokens, int64_t n, int bpt, char *err, size_t errlen);

#endif
