/* Storage dtypes of the trainer and their conversions.
 *
 * The CPU backend emulates bf16 exactly: values are stored as the upper 16
 * bits of an IEEE-754 binary32 (uint16_t), rounded to nearest-even on store,
 * and widened to fp32 (exact) on load. Every sum is accumulated in fp32 (or
 * wider), so "bf16-mixed" on the CPU rounds where a GPU kernel would store. */
#ifndef TR_DTYPE_H
#define TR_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum { TR_F32 = 0, TR_BF16 = 1, TR_F64 = 2 } tr_dtype;

static inline int64_t tr_dtype_bytes(tr_dtype dt) {
    return dt == TR_BF16 ? 2 : dt == TR_F64 ? 8 : 4;
}

static inline float tr_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; NaN stays a (quiet) NaN, overflow goes to inf. */
static inline uint16_t tr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE binary16 to fp32 (for safetensors F16 weights). */
static inline float tr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element i of a buffer of dtype dt, widened to fp32 (F32 or BF16 only). */
static inline float tr_ld(const void *p, int64_t i, tr_dtype dt) {
    return dt == TR_BF16 ? tr_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Stores v as element i, rounding when the buffer is bf16. */
static inline void tr_st(void *p, int64_t i, float v, tr_dtype dt) {
    if (dt == TR_BF16) ((uint16_t *)p)[i] = tr_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* Address of element i. */
static inline void *tr_at(void *p, int64_t i, tr_dtype dt) {
    return (char *)p + i * tr_dtype_bytes(dt);
}
static inline const void *tr_cat(const void *p, int64_t i, tr_dtype dt) {
    return (const char *)p + i * tr_dtype_bytes(dt);
}

#endif
