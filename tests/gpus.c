/* The GPU catalog (models/gpus.json) and the instance price catalog
 * (models/instances.json): they load, every figure is present, positive and
 * finite, a few figures match their published sources (spelled out here from
 * nvidia-smi outputs and NVIDIA data sheets, not from the program), aliases
 * resolve, and malformed catalogs are rejected with a one-line message naming
 * the GPU and the field. */
#include <check.h>
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gpu.h"
#include "model_config.h"
#include "test_util.h"

#define MiB (INT64_C(1) << 20)
#define GiB (INT64_C(1) << 30)

static est_gpu_catalog load_default(void) {
    est_gpu_catalog cat;
    char err[512] = "";
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    return cat;
}

static const est_gpu *must_find(const est_gpu_catalog *cat, const char *name) {
    const est_gpu *g = est_gpu_find(cat, name);
    ck_assert_msg(g != NULL, "GPU \"%s\" not in the catalog", name);
    return g;
}

/* ---- the shipped catalog -------------------------------------------------------- */

START_TEST(test_catalog_has_required_gpus) {
    est_gpu_catalog cat = load_default();
    static const char *required[] = {"a10-24gb",  "l4-24gb",   "l40s-48gb",      "rtx3090-24gb",
                                     "rtx4090-24gb", "a100-40gb", "a100-80gb",   "h100-80gb",
                                     "h100-pcie-80gb", "h200-141gb", "b200-180gb",
                                     /* issue 19 item 7: the GPUs people rent */
                                     "rtx-a6000-48gb", "rtx-a5000-24gb", "rtx6000-ada-48gb", "l40-48gb",
                                     "h100-nvl-94gb", "gh200-96gb"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const est_gpu *g = must_find(&cat, required[i]);
        ck_assert_str_eq(g->name, required[i]);
    }
    ck_assert_uint_ge(cat.count, sizeof required / sizeof required[0]);
    est_gpu_catalog_free(&cat);
    ck_assert_ptr_null(cat.gpus);
    ck_assert_uint_eq(cat.count, 0);
}
END_TEST

START_TEST(test_every_figure_positive_and_finite) {
    est_gpu_catalog cat = load_default();
    for (size_t i = 0; i < cat.count; i++) {
        const est_gpu *g = &cat.gpus[i];
        const double rates[] = {g->fp32_tflops, g->tf32_tflops, g->bf16_tflops, g->fp16_tflops,
                                g->hbm_gb_per_s, g->pcie_gb_per_s};
        for (size_t k = 0; k < sizeof rates / sizeof rates[0]; k++)
            ck_assert_msg(isfinite(rates[k]) && rates[k] > 0, "%s: figure %zu = %g", g->name, k, rates[k]);
        ck_assert_msg(isfinite(g->nvlink_gb_per_s) && g->nvlink_gb_per_s >= 0, "%s: nvlink", g->name);
        ck_assert_msg(g->display[0] != '\0', "%s: no display name", g->name);
        /* Memory is the driver's total: a whole number of MiB between 8 GiB and 1 TiB. */
        ck_assert_msg(g->memory_bytes % MiB == 0, "%s: memory not whole MiB", g->name);
        ck_assert_msg(g->memory_bytes > 8 * GiB && g->memory_bytes < 1024 * GiB, "%s: memory %lld",
                      g->name, (long long)g->memory_bytes);
        /* Dense tensor-core rates: fp16 = bf16 on every GPU here, TF32 half of BF16
         * (within the data sheets' rounding: L40S 183 vs 362.05, RTX 3090 35.6 vs 71)
         * and at least the plain FP32 rate. A sparse figure slipped in breaks these. */
        ck_assert_msg(fabs(g->bf16_tflops - g->fp16_tflops) < 1e-9, "%s: bf16 != fp16", g->name);
        ck_assert_msg(g->tf32_tflops <= 0.5 * g->bf16_tflops * 1.02, "%s: tf32 > bf16/2", g->name);
        ck_assert_msg(g->tf32_tflops >= g->fp32_tflops - 1e-9, "%s: tf32 < fp32", g->name);
        /* NVLink, where present, is no slower than the host link (the GH200's
         * NVLink-C2C to its CPU is as fast as its NVLink, 900 GB/s both). */
        ck_assert_msg(g->nvlink_gb_per_s == 0 || g->nvlink_gb_per_s >= g->pcie_gb_per_s, "%s", g->name);
    }
    est_gpu_catalog_free(&cat);
}
END_TEST

/* Figures checked against their published sources, transcribed here:
 * - nvidia-smi "Memory-Usage" totals: NVIDIA H100 80GB HBM3 81559MiB, NVIDIA H200
 *   143771MiB, NVIDIA A100-SXM4-80GB 81920MiB, NVIDIA L4 23034MiB.
 * - NVIDIA data sheets give tensor rates "with sparsity"; the dense rate is half:
 *   H100 SXM BF16 1,979 TF* -> 989.5, A100 BF16 624 TF* -> 312, L4 BF16 242 TF* -> 121.
 * - Links, per direction: H100 SXM NVLink 900 GB/s total -> 450, PCIe Gen5 128 -> 64;
 *   A100 SXM NVLink 600 -> 300, PCIe Gen4 64 -> 32. */
START_TEST(test_figures_match_sources) {
    est_gpu_catalog cat = load_default();
    const est_gpu *h100 = must_find(&cat, "h100-80gb");
    ck_assert_int_eq(h100->memory_bytes, 81559 * MiB);
    ck_assert_close(h100->bf16_tflops, 1979.0 / 2, 0, 0.001);
    ck_assert_close(h100->hbm_gb_per_s, 3350, 0, 0.001);
    ck_assert_close(h100->nvlink_gb_per_s, 900.0 / 2, 0, 0.001);
    ck_assert_close(h100->pcie_gb_per_s, 128.0 / 2, 0, 0.001);

    const est_gpu *h200 = must_find(&cat, "h200-141gb");
    ck_assert_int_eq(h200->memory_bytes, 143771 * MiB);
    ck_assert_close(h200->hbm_gb_per_s, 4800, 0, 0.001);

    const est_gpu *a100 = must_find(&cat, "a100-80gb");
    ck_assert_int_eq(a100->memory_bytes, 81920 * MiB);
    ck_assert_close(a100->bf16_tflops, 624.0 / 2, 0, 0.001);
    ck_assert_close(a100->nvlink_gb_per_s, 600.0 / 2, 0, 0.001);
    ck_assert_close(a100->pcie_gb_per_s, 64.0 / 2, 0, 0.001);

    /* H100 NVL (H100 datasheet, NVL column): BF16 1,671 TF* -> 835.5, 3.9 TB/s,
     * PCIe Gen5 128 -> 64, its NVLink a bridge of two cards -> 0. L40: BF16
     * with FP32 accumulate 181.05 dense (half the L40S's 362.05). RTX A6000:
     * Tensor 309.7 TF* -> 154.8. GH200: NVLink-C2C 900 GB/s -> 450 to the host. */
    const est_gpu *nvl = must_find(&cat, "h100-nvl");
    ck_assert_close(nvl->bf16_tflops, 1671.0 / 2, 0, 0.001);
    ck_assert_close(nvl->hbm_gb_per_s, 3900, 0, 0.001);
    ck_assert_close(nvl->pcie_gb_per_s, 128.0 / 2, 0, 0.001);
    ck_assert_double_eq(nvl->nvlink_gb_per_s, 0);
    ck_assert_close(must_find(&cat, "l40")->bf16_tflops, 181.05, 0, 0.001);
    ck_assert_close(must_find(&cat, "a6000")->bf16_tflops, 309.7 / 2, 0, 0.001);
    ck_assert_close(must_find(&cat, "gh200")->pcie_gb_per_s, 900.0 / 2, 0, 0.001);

    const est_gpu *l4 = must_find(&cat, "l4-24gb");
    ck_assert_int_eq(l4->memory_bytes, 23034 * MiB);
    ck_assert_close(l4->bf16_tflops, 242.0 / 2, 0, 0.001);
    ck_assert_double_eq(l4->nvlink_gb_per_s, 0);

    /* GeForce: the fp16 tensor rate with FP32 accumulate (Ada whitepaper: 165.2 dense
     * for the RTX 4090), not the 330 TF of FP16 accumulate. */
    const est_gpu *g4090 = must_find(&cat, "rtx4090-24gb");
    ck_assert_close(g4090->fp16_tflops, 165.2, 0, 0.001);
    est_gpu_catalog_free(&cat);
}
END_TEST

START_TEST(test_every_figure_has_a_source) {
    char path[4096];
    ft_data_path("models/gpus.json", path, sizeof path);
    char *text = test_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert(root != NULL);
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(root, "gpus")) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(g, "sources");
        const char *name = cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring;
        static const char *keys[] = {"memory", "tflops", "hbm", "nvlink", "pcie"};
        for (size_t k = 0; k < 5; k++) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(src, keys[k]);
            ck_assert_msg(cJSON_IsString(s) && strlen(s->valuestring) >= 20, "%s: sources.%s", name,
                          keys[k]);
        }
        /* The memory source names the MiB figure it was taken from. */
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(g, "memory_bytes");
        char mib[32];
        snprintf(mib, sizeof mib, "%lld MiB", (long long)(mem->valuedouble / (double)MiB));
        ck_assert_msg(strstr(cJSON_GetObjectItemCaseSensitive(src, "memory")->valuestring, mib) != NULL,
                      "%s: sources.memory does not say %s", name, mib);
    }
    cJSON_Delete(root);
}
END_TEST

START_TEST(test_alias_lookup) {
    est_gpu_catalog cat = load_default();
    const est_gpu *h100 = must_find(&cat, "h100-80gb");
    ck_assert_ptr_eq(est_gpu_find(&cat, "h100"), h100);
    ck_assert_ptr_eq(est_gpu_find(&cat, "H100"), h100);
    ck_assert_ptr_eq(est_gpu_find(&cat, "h100-sxm"), h100);
    ck_assert_ptr_eq(est_gpu_find(&cat, "H100-80GB"), h100);
    ck_assert_ptr_ne(est_gpu_find(&cat, "h100-pcie"), h100);
    ck_assert_str_eq(must_find(&cat, "h100-pcie")->name, "h100-pcie-80gb");
    ck_assert_str_eq(must_find(&cat, "H200")->name, "h200-141gb");
    ck_assert_str_eq(must_find(&cat, "rtx4090")->name, "rtx4090-24gb");
    ck_assert_str_eq(must_find(&cat, "3090")->name, "rtx3090-24gb");
    ck_assert_str_eq(must_find(&cat, "b200")->name, "b200-180gb");
    /* "a100" is ambiguous (40 or 80 GB): no alias, so the user must say which. */
    ck_assert_ptr_null(est_gpu_find(&cat, "a100"));
    ck_assert_ptr_null(est_gpu_find(&cat, "h100-80"));
    ck_assert_ptr_null(est_gpu_find(&cat, ""));
    ck_assert_ptr_null(est_gpu_find(&cat, NULL));
    ck_assert_ptr_null(est_gpu_find(NULL, "h100"));
    est_gpu_catalog_free(&cat);
}
END_TEST

/* ---- malformed catalogs ------------------------------------------------------------ */

/* One valid entry; GPU_WITH(x) splices x in place of the bf16 figure. */
#define GPU_HEAD "{\"name\": \"test-gpu\", \"aliases\": [\"tg\"], \"display\": \"Test GPU\", "
#define GPU_NUMS_BEFORE "\"memory_bytes\": 1073741824, \"fp32_tflops\": 10, \"tf32_tflops\": 20, "
#define GPU_COMPUTE "\"arch\": \"ampere\", \"sms\": 80, \"matmul_ceiling_tflops\": 30, "
#define GPU_NUMS_AFTER                                                                              \
    ", \"fp16_tflops\": 40, \"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": 0, \"pcie_gb_per_s\": 32, " \
    GPU_COMPUTE "\"sources\": {\"memory\": \"m\", \"tflops\": \"t\", \"hbm\": \"h\", \"nvlink\": \"n\", "  \
    "\"pcie\": \"p\", \"sms\": \"s\", \"matmul_ceiling\": \"c\"}}"
#define GPU_WITH(BF16) GPU_HEAD GPU_NUMS_BEFORE BF16 GPU_NUMS_AFTER
#define CATALOG(...) "{\"gpus\": [" __VA_ARGS__ "]}"

static void expect_bad(const char *text, const char *needle1, const char *needle2) {
    est_gpu_catalog cat = {(est_gpu *)1, 99};
    char err[512] = "";
    int rc = est_gpu_catalog_parse(text, strlen(text), "test.json", &cat, err, sizeof err);
    ck_assert_msg(rc == -1, "accepted: %s", text);
    ck_assert_ptr_null(cat.gpus);
    ck_assert_uint_eq(cat.count, 0);
    ck_assert_msg(err[0] && !strchr(err, '\n'), "bad message \"%s\"", err);
    if (needle1) ck_assert_msg(strstr(err, needle1), "\"%s\" lacks \"%s\"", err, needle1);
    if (needle2) ck_assert_msg(strstr(err, needle2), "\"%s\" lacks \"%s\"", err, needle2);
}

/* The matmul ceilings (calibrate/import/mamf.py): the cards with a MAMF row
 * carry its figure (shared/data/mamf/mamf.csv: A100 SXM 271.2, H100 SXM 794.5,
 * B200 SXM 1745.0 TFLOP/s; H200 "is the same" as H100 SXM); a card with a
 * published measurement of its own, that; the rest their architecture's
 * measured ratio of their own peak (Ampere: A100 PCIe 252.9/312 and A100 SXM
 * 271.2/312, mean 84.0%); every ceiling at most the dense peak,
 * every SM count the data sheets' (A100 108, H100 SXM 132, RTX 3090 82). */
START_TEST(test_matmul_ceilings) {
    est_gpu_catalog cat = load_default();
    ck_assert_close(must_find(&cat, "a100-40gb")->matmul_ceiling_tflops, 271.2, 0, 1e-6);
    ck_assert_close(must_find(&cat, "a100-80gb")->matmul_ceiling_tflops, 271.2, 0, 1e-6);
    ck_assert_close(must_find(&cat, "h100-80gb")->matmul_ceiling_tflops, 794.5, 0, 1e-6);
    ck_assert_close(must_find(&cat, "h200-141gb")->matmul_ceiling_tflops, 794.5, 0, 1e-6);
    ck_assert_close(must_find(&cat, "b200-180gb")->matmul_ceiling_tflops, 1745.0, 0, 1e-6);
    /* RTX 3090: measured by torch.matmul, triton-lang/triton#319 (68.27 at
     * 1280^3); A10 (Ampere, no measurement): the mean of the two A100 ratios. */
    ck_assert_close(must_find(&cat, "rtx3090-24gb")->matmul_ceiling_tflops, 68.3, 0, 1e-6);
    const double ampere = (252.9 / 312 + 271.2 / 312) / 2;
    ck_assert_close(must_find(&cat, "a10-24gb")->matmul_ceiling_tflops, ampere * 125, 0.05, 0);
    ck_assert_int_eq(must_find(&cat, "a100-80gb")->sms, 108);
    ck_assert_int_eq(must_find(&cat, "h100-80gb")->sms, 132);
    ck_assert_int_eq(must_find(&cat, "rtx3090-24gb")->sms, 82);
    for (size_t i = 0; i < cat.count; i++) {
        ck_assert_double_le(cat.gpus[i].matmul_ceiling_tflops, cat.gpus[i].bf16_tflops);
        ck_assert_double_gt(cat.gpus[i].matmul_ceiling_tflops, 0.7 * cat.gpus[i].bf16_tflops);
    }
    est_gpu_catalog_free(&cat);
}
END_TEST

START_TEST(test_minimal_catalog_parses) {
    const char *text = CATALOG(GPU_WITH("\"bf16_tflops\": 40"));
    est_gpu_catalog cat;
    char err[512] = "";
    ck_assert_msg(est_gpu_catalog_parse(text, strlen(text), "t", &cat, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(cat.count, 1);
    ck_assert_int_eq(cat.gpus[0].memory_bytes, INT64_C(1073741824));
    ck_assert_double_eq(cat.gpus[0].bf16_tflops, 40);
    ck_assert_ptr_eq(est_gpu_find(&cat, "TG"), &cat.gpus[0]);
    est_gpu_catalog_free(&cat);
}
END_TEST

START_TEST(test_reject_bad_figures) {
    /* each message names the GPU and the field */
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": \"40\"")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": -40")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": 0")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": 1e300")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": null")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": true")), "test-gpu", "bf16_tflops");
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops_typo\": 40")), "test-gpu", "bf16_tflops");
    /* the ceiling may not pass the peak (40 here); arch and sms are required */
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 20" GPU_NUMS_AFTER), "test-gpu",
               "matmul_ceiling_tflops");
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 40, \"fp16_tflops\": 40, "
                                                "\"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": 0, "
                                                "\"pcie_gb_per_s\": 32, \"arch\": \"kepler\", \"sms\": 8, "
                                                "\"matmul_ceiling_tflops\": 30}"),
               "test-gpu", "arch");
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 40, \"fp16_tflops\": 40, "
                                                "\"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": 0, "
                                                "\"pcie_gb_per_s\": 32, \"arch\": \"ada\", "
                                                "\"matmul_ceiling_tflops\": 30}"),
               "test-gpu", "sms");
    /* memory: must be a whole, positive, plausible byte count */
    expect_bad(CATALOG(GPU_HEAD "\"memory_bytes\": 80.5, \"fp32_tflops\": 10, \"tf32_tflops\": 20, "
                                "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "test-gpu", "memory_bytes");
    expect_bad(CATALOG(GPU_HEAD "\"memory_bytes\": -1, \"fp32_tflops\": 10, \"tf32_tflops\": 20, "
                                "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "test-gpu", "memory_bytes");
    expect_bad(CATALOG(GPU_HEAD "\"memory_bytes\": 1e30, \"fp32_tflops\": 10, \"tf32_tflops\": 20, "
                                "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "test-gpu", "memory_bytes");
    expect_bad(CATALOG(GPU_HEAD "\"fp32_tflops\": 10, \"tf32_tflops\": 20, \"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "test-gpu", "memory_bytes");
    /* a negative NVLink figure (0 is allowed: no NVLink) */
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 40, \"fp16_tflops\": 40, "
                                                "\"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": -1, "
                                                "\"pcie_gb_per_s\": 32, \"sources\": {}}"),
               "test-gpu", "nvlink_gb_per_s");
}
END_TEST

START_TEST(test_reject_bad_entries) {
    /* sources: required, each figure's source a non-empty string */
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 40, \"fp16_tflops\": 40, "
                                                "\"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": 0, "
                                                "\"pcie_gb_per_s\": 32, " GPU_COMPUTE "\"x\": 0}"),
               "test-gpu", "sources");
    expect_bad(CATALOG(GPU_HEAD GPU_NUMS_BEFORE "\"bf16_tflops\": 40, \"fp16_tflops\": 40, "
                                                "\"hbm_gb_per_s\": 500, \"nvlink_gb_per_s\": 0, "
                                                "\"pcie_gb_per_s\": 32, " GPU_COMPUTE "\"sources\": {\"memory\": \"m\", "
                                                "\"tflops\": \"t\", \"hbm\": \"h\", \"nvlink\": \"n\"}}"),
               "test-gpu", "sources.pcie");
    /* name: required, no spaces; the message then names the entry by position */
    expect_bad(CATALOG("{\"display\": \"X\", " GPU_NUMS_BEFORE "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "entry 1", "name");
    expect_bad(CATALOG("{\"name\": \"bad name\", \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "entry 1", "name");
    expect_bad(CATALOG("{\"name\": \"this-name-is-far-too-long-for-the-catalog-key\", \"display\": \"X\", "
                       GPU_NUMS_BEFORE "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "entry 1", "name");
    expect_bad(CATALOG("{\"name\": \"x\", " GPU_NUMS_BEFORE "\"bf16_tflops\": 40" GPU_NUMS_AFTER), "\"x\"",
               "display");
    expect_bad(CATALOG("{\"name\": \"x\", \"display\": \"A display name much longer than forty-seven "
                       "characters in all\", " GPU_NUMS_BEFORE "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"x\"", "display");
    expect_bad(CATALOG("{\"name\": \"x\", \"aliases\": \"y\", \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"x\"", "aliases");
    expect_bad(CATALOG("{\"name\": \"x\", \"aliases\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"display\": \"X\", "
                       GPU_NUMS_BEFORE "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"x\"", "aliases");
    expect_bad(CATALOG("{\"name\": \"x\", \"aliases\": [7], \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"x\"", "aliases");
    expect_bad(CATALOG("42"), "entry 1", NULL);
    /* the second entry is the bad one, and is named */
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": 40") ", {\"name\": \"second\"}"), "second", "display");
}
END_TEST

START_TEST(test_reject_duplicates) {
    /* same name twice, case-insensitively */
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": 40") ", "
                       "{\"name\": \"TEST-GPU\", \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "TEST-GPU", "test-gpu");
    /* an alias that is another GPU's alias */
    expect_bad(CATALOG(GPU_WITH("\"bf16_tflops\": 40") ", "
                       "{\"name\": \"other\", \"aliases\": [\"tg\"], \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"tg\"", "test-gpu");
    /* an alias repeated within one GPU */
    expect_bad(CATALOG("{\"name\": \"x\", \"aliases\": [\"y\", \"Y\"], \"display\": \"X\", " GPU_NUMS_BEFORE
                       "\"bf16_tflops\": 40" GPU_NUMS_AFTER),
               "\"x\"", "\"Y\"");
}
END_TEST

START_TEST(test_reject_not_a_catalog) {
    expect_bad("", "empty", NULL);
    expect_bad("not json", "test.json", NULL);
    expect_bad("{\"gpus\": [", "test.json", NULL);
    expect_bad("[]", "gpus", NULL);
    expect_bad("{}", "gpus", NULL);
    expect_bad("{\"gpus\": {}}", "gpus", NULL);
    expect_bad("{\"gpus\": []}", "empty", NULL);
    expect_bad("{\"GPUS\": [" GPU_WITH("\"bf16_tflops\": 40") "]}", "gpus", NULL);

    est_gpu_catalog cat;
    char err[512] = "";
    ck_assert_int_eq(est_gpu_catalog_load("/nonexistent/gpus.json", &cat, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/gpus.json") && !strchr(err, '\n'), "%s", err);
    ck_assert_ptr_null(cat.gpus);
    ck_assert_int_eq(est_gpu_catalog_parse("{}", 2, "x", NULL, err, sizeof err), -1);
}
END_TEST

/* A real catalog, truncated at many points, never loads and never crashes. */
START_TEST(test_reject_truncated_catalog) {
    char path[4096];
    ft_data_path("models/gpus.json", path, sizeof path);
    size_t len;
    char *text = test_slurp(path, &len);
    for (size_t cut = 0; cut + 2 < len; cut += 61) {
        est_gpu_catalog cat;
        char err[512] = "";
        ck_assert_msg(est_gpu_catalog_parse(text, cut, "cut", &cat, err, sizeof err) == -1,
                      "accepted a catalog cut at %zu", cut);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "cut %zu: \"%s\"", cut, err);
    }
    free(text);
}
END_TEST

/* ---- the instance price catalog ---------------------------------------------------- */

static const cJSON *str_field(const cJSON *o, const char *k) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(s) && s->valuestring && s->valuestring[0] ? s : NULL;
}

static double num_field(const cJSON *o, const char *k) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(n) ? n->valuedouble : NAN;
}

START_TEST(test_instances_catalog) {
    est_gpu_catalog cat = load_default();
    char path[4096];
    ft_data_path("models/instances.json", path, sizeof path);
    char *text = test_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert_msg(root != NULL, "instances.json is not JSON");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "instances");
    ck_assert(cJSON_IsArray(arr));

    /* The shapes issue 3 asks for, as (GPU, count) pairs that must be offered. */
    struct {
        const char *gpu;
        int n;
        int found;
    } need[] = {{"a10-24gb", 1, 0},  {"a100-40gb", 1, 0}, {"a100-40gb", 8, 0},
                {"a100-80gb", 8, 0}, {"h100-80gb", 1, 0}, {"h100-80gb", 8, 0},
                {"h200-141gb", 8, 0}, {"l4-24gb", 1, 0},  {"l40s-48gb", 1, 0},
                {"rtx4090-24gb", 1, 0}};

    const cJSON *it;
    int count = 0;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *name = str_field(it, "name");
        ck_assert_msg(name != NULL, "instance %d has no name", count);
        const char *nm = name->valuestring;
        /* names are unique */
        const cJSON *other;
        int same = 0;
        cJSON_ArrayForEach(other, arr) {
            const cJSON *on = str_field(other, "name");
            if (on && !strcasecmp(on->valuestring, nm)) same++;
        }
        ck_assert_msg(same == 1, "%s: duplicate name", nm);

        ck_assert_msg(str_field(it, "provider"), "%s: provider", nm);
        const cJSON *gpu = str_field(it, "gpu");
        ck_assert_msg(gpu && est_gpu_find(&cat, gpu->valuestring), "%s: GPU not in gpus.json", nm);
        const char *gname = est_gpu_find(&cat, gpu->valuestring)->name;

        double n = num_field(it, "gpus");
        ck_assert_msg(n >= 1 && n <= 64 && n == floor(n), "%s: gpus = %g", nm, n);
        const cJSON *ic = str_field(it, "interconnect");
        ck_assert_msg(ic && (!strcmp(ic->valuestring, "nvlink") || !strcmp(ic->valuestring, "pcie")),
                      "%s: interconnect", nm);
        /* NVLink instances need GPUs that have NVLink */
        if (!strcmp(ic->valuestring, "nvlink"))
            ck_assert_msg(est_gpu_find(&cat, gname)->nvlink_gb_per_s > 0, "%s: nvlink on %s", nm, gname);

        double inter = num_field(it, "inter_node_gb_per_s");
        ck_assert_msg(isfinite(inter) && inter >= 0 && inter < 10000, "%s: inter_node_gb_per_s", nm);
        double ram = num_field(it, "host_ram_bytes");
        ck_assert_msg(ram >= 8.0 * GiB && ram < 64.0 * 1024 * GiB && ram == floor(ram),
                      "%s: host_ram_bytes", nm);
        double vcpus = num_field(it, "vcpus");
        ck_assert_msg(vcpus >= 1 && vcpus <= 1024 && vcpus == floor(vcpus), "%s: vcpus", nm);
        /* The host of the CPU optimizer: cores (a vCPU is a hyperthread) and the
         * DRAM peak of 1-2 server sockets of DDR4-2933 to DDR5-5600 with 6-8
         * channels each (140.8 to 716.8 GB/s), with a source. */
        double cores = num_field(it, "host_cores"), mem = num_field(it, "host_mem_gb_per_s");
        ck_assert_msg(cores == floor(vcpus / 2) || (vcpus < 2 && cores == 1), "%s: host_cores", nm);
        ck_assert_msg(mem >= 140.8 && mem <= 716.8, "%s: host_mem_gb_per_s %g", nm, mem);
        ck_assert_msg(str_field(it, "host_source") && str_field(it, "host_cpu"), "%s: host_source", nm);
        double usd = num_field(it, "usd_per_hour");
        ck_assert_msg(isfinite(usd) && usd > 0 && usd < 1000, "%s: usd_per_hour", nm);
        /* a price per GPU-hour between $0.05 and $20 (sanity against typos) */
        ck_assert_msg(usd / n > 0.05 && usd / n < 20, "%s: $%g per GPU-hour", nm, usd / n);

        const cJSON *src = str_field(it, "price_source");
        ck_assert_msg(src && strstr(src->valuestring, "http"), "%s: price_source without a URL", nm);
        const cJSON *date = str_field(it, "price_date");
        int y = 0, m = 0;
        char tail;
        ck_assert_msg(date && strlen(date->valuestring) == 7 &&
                          sscanf(date->valuestring, "%4d-%2d%c", &y, &m, &tail) == 2 && y >= 2020 &&
                          y <= 2100 && m >= 1 && m <= 12,
                      "%s: price_date must be YYYY-MM", nm);

        for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
            if (!strcmp(need[k].gpu, gname) && need[k].n == (int)n) need[k].found = 1;
        count++;
    }
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
        ck_assert_msg(need[k].found, "no instance with %dx %s", need[k].n, need[k].gpu);
    cJSON_Delete(root);
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_gpus(void); /* registered by the Makefile */
Suite *suite_gpus(void) {
    Suite *s = suite_create("gpus");
    TCase *tc = tcase_create("catalog");
    tcase_add_test(tc, test_catalog_has_required_gpus);
    tcase_add_test(tc, test_every_figure_positive_and_finite);
    tcase_add_test(tc, test_figures_match_sources);
    tcase_add_test(tc, test_every_figure_has_a_source);
    tcase_add_test(tc, test_alias_lookup);
    tcase_add_test(tc, test_matmul_ceilings);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_test(tc, test_minimal_catalog_parses);
    tcase_add_test(tc, test_reject_bad_figures);
    tcase_add_test(tc, test_reject_bad_entries);
    tcase_add_test(tc, test_reject_duplicates);
    tcase_add_test(tc, test_reject_not_a_catalog);
    tcase_add_test(tc, test_reject_truncated_catalog);
    suite_add_tcase(s, tc);

    tc = tcase_create("instances");
    tcase_add_test(tc, test_instances_catalog);
    suite_add_tcase(s, tc);
    return s;
}
