/* Safetensors headers, read without the weights: per-tensor dtype and shape,
 * for a --model given as a .safetensors file, a model.safetensors.index.json
 * or a model folder. Format (huggingface/safetensors README): an 8-byte
 * little-endian header length N, N bytes of JSON {name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. A header
 * is untrusted: N is bounded (the format's own 100,000,000-byte limit) and
 * checked against the file, every offset against the data region, every shape
 * against overflow and against its byte range. */
#ifndef EST_ST_HEADER_H
#define EST_ST_HEADER_H

#include <stddef.h>
#include <stdint.h>

#define EST_ST_MAX_HEADER_BYTES ((uint64_t)100000000)
#define EST_ST_MAX_FILES 4096

typedef struct est_st_summary {
    int64_t tensors;     /* tensors read */
    int64_t elements;    /* their elements, all dtypes */
    int64_t bytes;       /* their data bytes */
    int64_t files;       /* files read */
    char dtypes[64];     /* dtypes seen, "BF16" or "BF16+F32" */
} est_st_summary;

/* Parses one header (the N JSON bytes) whose data region has data_bytes bytes,
 * adding its tensors to *acc. 0 or -1 with one line. */
int est_st_header_parse(const char *json, size_t len, uint64_t data_bytes, est_st_summary *acc,
                        char *err, size_t errlen);

/* Reads the header of one .safetensors file and adds it to *acc. */
int est_st_scan_file(const char *path, est_st_summary *acc, char *err, size_t errlen);

/* Reads a model.safetensors.index.json and every shard it names (in the same
 * folder), adding them to *acc. */
int est_st_scan_index(const char *path, est_st_summary *acc, char *err, size_t errlen);

#endif
