/* libFuzzer target: ftrain's safetensors header parser (trainer/safetensors.c)
 * on arbitrary bytes. Whatever it accepts must describe tensors that lie inside
 * the buffer, tile it exactly, and be readable element by element. */
#include <stdint.h>
#include <stdlib.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_st_header h;
    char err[256];
    if (tr_st_parse(data, size, &h, err, sizeof err) != 0) return 0;
    if (h.data_start > size || h.data_len != size - h.data_start) abort();
    uint64_t covered = 0;
    for (int64_t i = 0; i < h.count; i++) {
        const tr_st_tensor *t = &h.tensors[i];
        if (t->begin > t->end || t->end > h.data_len) abort();
        if ((uint64_t)t->numel * (uint64_t)tr_st_dtype_bytes(t->dtype) != t->end - t->begin) abort();
        covered += t->end - t->begin;
        if (t->numel > 0 && (t->dtype == TR_ST_F32 || t->dtype == TR_ST_BF16 || t->dtype == TR_ST_F16)) {
            volatile float first = tr_st_value(data + h.data_start, t, 0);
            volatile float last = tr_st_value(data + h.data_start, t, t->numel - 1);
            (void)first;
            (void)last;
        }
        if (tr_st_find(&h, t->name) == NULL) abort();
    }
    if (covered != h.data_len) abort();
    tr_st_free(&h);
    return 0;
}
