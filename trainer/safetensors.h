/* A strict safetensors reader (https://github.com/huggingface/safetensors):
 *   8 bytes   N, little-endian uint64: length of the JSON header
 *   N bytes   JSON object: name -> {"dtype", "shape", "data_offsets": [begin, end]},
 *             plus an optional "__metadata__" object of strings
 *   rest      the data buffer; offsets are relative to its start
 * Checked: the header fits the file, is valid UTF-8 JSON of the right types,
 * names are unique and short, dtypes known, shape products do not overflow and
 * equal (end - begin) / dtype size, and the tensors tile the data buffer
 * exactly (sorted by offset: no gap, no overlap, nothing after), which is the
 * reference implementation's rule.
 *
 * tr_st_parse is a pure function of a byte buffer (the fuzz target calls it). */
#ifndef TR_SAFETENSORS_H
#define TR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define TR_ST_NAME_MAX 256
#define TR_ST_MAX_DIMS 8
#define TR_ST_MAX_HEADER ((uint64_t)100 << 20)  /* the reference reader's limit: 100 MB */
#define TR_ST_MAX_TENSORS 1000000

typedef enum {
    TR_ST_F64, TR_ST_F32, TR_ST_F16, TR_ST_BF16, TR_ST_I64, TR_ST_I32, TR_ST_I16, TR_ST_I8,
    TR_ST_U8, TR_ST_BOOL, TR_ST_DTYPE_COUNT
} tr_st_dtype;

typedef struct tr_st_tensor {
    char name[TR_ST_NAME_MAX];
    tr_st_dtype dtype;
    int ndim;
    int64_t shape[TR_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;        /* byte range in the data buffer */
} tr_st_tensor;

typedef struct tr_st_header {
    tr_st_tensor *tensors;      /* in header order */
    int64_t count;
    uint64_t data_start;        /* 8 + N: where the data buffer begins in the file */
    uint64_t data_len;
} tr_st_header;

int tr_st_parse(const uint8_t *buf, size_t len, tr_st_header *out, char *err, size_t errlen);
void tr_st_free(tr_st_header *h);
const tr_st_tensor *tr_st_find(const tr_st_header *h, const char *name);
const char *tr_st_dtype_name(tr_st_dtype d);
int64_t tr_st_dtype_bytes(tr_st_dtype d);

/* Element i of a float tensor (F32, F16, BF16) as fp32; data is the buffer start. */
float tr_st_value(const uint8_t *data, const tr_st_tensor *t, int64_t i);

#endif
