/* Sweeps, their CSV and SVG, and the timeline chart. The SVGs are checked
 * with a small XML well-formedness checker written here (elements nest and
 * close, attributes are quoted, entities are the XML ones, one root) that is
 * itself shown to reject broken documents; then the series, the capacity
 * line, the fit boundary and the measured points must be present. */
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "estimate.h"
#include "sweep.h"
#include "test_util.h"

/* ---- a minimal XML 1.0 well-formedness checker ------------------------------------ */

static bool name_char(char c, bool first) {
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && (isdigit((unsigned char)c) || c == '-' || c == '.'));
}

/* An entity reference at s ('&'); returns its length or 0. */
static size_t entity(const char *s) {
    static const char *const known[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (size_t i = 0; i < 5; i++)
        if (!strncmp(s, known[i], strlen(known[i]))) return strlen(known[i]);
    if (s[1] == '#') {
        size_t i = 2;
        bool hex = s[2] == 'x';
        if (hex) i++;
        size_t start = i;
        while (hex ? isxdigit((unsigned char)s[i]) : isdigit((unsigned char)s[i])) i++;
        if (i > start && s[i] == ';') return i + 1;
    }
    return 0;
}

/* Character data (text or attribute value) up to `stop`: no '<', valid entities. */
static bool char_data(const char **p, char stop) {
    while (**p && **p != stop) {
        if (**p == '<' && stop != '<') return false;
        if (**p == '&') {
            size_t n = entity(*p);
            if (!n) return false;
            *p += n;
        } else {
            (*p)++;
        }
    }
    return true;
}

static bool xml_well_formed(const char *doc, char *why, size_t n) {
    const char *p = doc;
    char stack[64][64];
    int depth = 0, roots = 0;
#define BAD(msg) do { snprintf(why, n, "%s at byte %ld", msg, (long)(p - doc)); return false; } while (0)
    if (!strncmp(p, "<?xml", 5)) {
        const char *e = strstr(p, "?>");
        if (!e) BAD("unterminated declaration");
        p = e + 2;
    }
    while (*p) {
        if (*p != '<') {
            if (depth == 0) {
                if (!isspace((unsigned char)*p)) BAD("text outside the root");
                p++;
                continue;
            }
            if (!char_data(&p, '<')) BAD("bad character data");
            continue;
        }
        if (!strncmp(p, "<!--", 4)) {
            const char *e = strstr(p + 4, "-->");
            if (!e) BAD("unterminated comment");
            p = e + 3;
            continue;
        }
        if (p[1] == '/') {
            p += 2;
            const char *s = p;
            while (name_char(*p, p == s)) p++;
            if (depth == 0 || (size_t)(p - s) != strlen(stack[depth - 1]) ||
                strncmp(s, stack[depth - 1], (size_t)(p - s)))
                BAD("mismatched end tag");
            depth--;
            while (isspace((unsigned char)*p)) p++;
            if (*p != '>') BAD("bad end tag");
            p++;
            continue;
        }
        p++;
        const char *s = p;
        if (!name_char(*p, true)) BAD("bad element name");
        while (name_char(*p, p == s)) p++;
        if (p - s >= 63 || depth == 64) BAD("name too long or nesting too deep");
        char name[64];
        memcpy(name, s, (size_t)(p - s));
        name[p - s] = '\0';
        /* Attributes: name="value" or name='value', each name once. */
        char seen[32][64];
        int nseen = 0;
        for (;;) {
            bool space = false;
            while (isspace((unsigned char)*p)) p++, space = true;
            if (*p == '>' || (*p == '/' && p[1] == '>')) break;
            if (!space) BAD("attributes must be separated by space");
            const char *a = p;
            if (!name_char(*p, true)) BAD("bad attribute name");
            while (name_char(*p, p == a)) p++;
            if (p - a >= 63) BAD("attribute name too long");
            for (int i = 0; i < nseen; i++)
                if ((size_t)(p - a) == strlen(seen[i]) && !strncmp(a, seen[i], (size_t)(p - a)))
                    BAD("duplicate attribute");
            if (nseen < 32) {
                memcpy(seen[nseen], a, (size_t)(p - a));
                seen[nseen++][p - a] = '\0';
            }
            if (*p++ != '=') BAD("attribute without =");
            char q = *p++;
            if (q != '"' && q != '\'') BAD("unquoted attribute");
            if (!char_data(&p, q) || *p != q) BAD("bad attribute value");
            p++;
        }
        if (*p == '/') {
            p += 2;
            if (depth == 0) roots++;
        } else {
            p++;
            if (depth == 0) roots++;
            strcpy(stack[depth++], name);
        }
        if (roots > 1) BAD("more than one root element");
    }
    if (depth != 0) BAD("unclosed element");
    if (roots != 1) BAD("no root element");
#undef BAD
    return true;
}

START_TEST(test_checker_rejects_broken_xml) {
    char why[128];
    ck_assert(xml_well_formed("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>t &amp; &#38;</a>\n", why, sizeof why));
    const char *bad[] = {
        "<a><b></a></b>", "<a x=1></a>", "<a>&nope;</a>", "<a></a><b></b>", "<a>",
        "<a x=\"1\" x=\"2\"/>", "<a>x < y</a>", "text<a/>", "<a x=\"<\"/>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!xml_well_formed(bad[i], why, sizeof why), "accepted %s", bad[i]);
}
END_TEST

/* ---- sweeps --------------------------------------------------------------------------- */

static est_gpu_catalog cat;
static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
}
static void teardown(void) { est_gpu_catalog_free(&cat); }

/* The gpjt configuration: Qwen1.5-0.5B, DeepSpeed ZeRO-3, fp16, one RTX 3090. */
static est_run gpjt_run(void) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load("qwen1.5-0.5b", &m, err, sizeof err) == 0, "%s", err);
    est_run r;
    est_run_defaults(&r, &m, est_gpu_find(&cat, "rtx3090-24gb"));
    r.precision = EST_PREC_FP16_MIXED;
    r.zero_stage = 3;
    r.padding_mask = true;
    return r;
}

START_TEST(test_seq_sweep_table_csv_svg) {
    est_run r = gpjt_run();
    est_sweep s;
    char err[256];
    est_range range = {.start = 256, .stop = 8192, .step = 256};
    ck_assert_msg(est_sweep_run(&r, EST_SWEEP_SEQ, range, NULL, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(s.n, 32);
    /* Allocated memory never falls as the sequence grows (the reserved peak
     * can: the caching allocator's fragmentation is not monotonic, as the
     * measured sweeps show); each point is the estimate itself. */
    est_estimate e;
    est_estimate_init(&e);
    for (size_t i = 0; i < s.n; i++) {
        ck_assert(s.pts[i].valid);
        if (i) ck_assert_int_ge(s.pts[i].peak_allocated_bytes, s.pts[i - 1].peak_allocated_bytes);
        r.seq_len = s.pts[i].x;
        ck_assert(est_estimate_run(&r, &e, err, sizeof err) == 0);
        ck_assert_int_eq(e.device_used_bytes, s.pts[i].device_used_bytes);
        int64_t sum = 0;
        for (int c = 0; c < EST_CAT_COUNT; c++) sum += s.pts[i].at_peak[c];
        ck_assert_int_eq(sum, s.pts[i].device_used_bytes); /* the stack is what the device holds */
    }
    est_estimate_free(&e);
    long last = est_sweep_last_fit(&s);
    ck_assert_msg(last > 0 && (size_t)last < s.n - 1, "the 3090 runs out within 8192 (last %ld)", last);
    ck_assert(s.pts[last].fits && !s.pts[last + 1].fits);

    char dir[] = "/tmp/ftest-sweep-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char csv[128], svg[128];
    snprintf(csv, sizeof csv, "%s/s.csv", dir);
    snprintf(svg, sizeof svg, "%s/s.svg", dir);
    FILE *f = fopen(csv, "w");
    ck_assert_int_eq(est_sweep_csv(f, &s), 0);
    fclose(f);
    char *t = test_slurp(csv, NULL);
    size_t lines = 0;
    for (char *c = t; *c; c++) lines += *c == '\n';
    ck_assert_uint_eq(lines, s.n + 1);
    ck_assert(!strncmp(t, "seq,params_bytes,", 17));
    free(t);

    /* The measured points of the committed records that match. */
    est_sweep_measured *m = NULL;
    size_t nm = 0;
    ck_assert_msg(est_sweep_measured_points(&s, test_repo_path("calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl"),
                                            &cat, &m, &nm, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(nm, 1000);
    ck_assert_msg(est_sweep_svg(svg, &s, m, nm, err, sizeof err) == 0, "%s", err);
    t = test_slurp(svg, NULL);
    char why[128];
    ck_assert_msg(xml_well_formed(t, why, sizeof why), "%s", why);
    for (int c = 0; c < EST_CAT_COUNT; c++) {
        char id[64];
        snprintf(id, sizeof id, "id=\"series-%s\"", est_category_names[c]);
        ck_assert_msg(strstr(t, id), "no %s", id);
    }
    ck_assert(strstr(t, "id=\"capacity\""));
    ck_assert(strstr(t, "id=\"fit-boundary\""));
    ck_assert(strstr(t, "class=\"measured\""));
    free(t);
    free(m);
    unlink(csv);
    unlink(svg);
    rmdir(dir);
    est_sweep_free(&s);
}
END_TEST

/* A batch sweep past the OOM: the committed OOM record appears as a cross. */
START_TEST(test_batch_sweep_with_oom_record) {
    est_run r = gpjt_run();
    r.checkpointing = EST_CKPT_FULL;
    est_sweep s;
    char err[256];
    est_range range = {.start = 1, .stop = 6, .step = 1};
    ck_assert_msg(est_sweep_run(&r, EST_SWEEP_BATCH, range, NULL, &s, err, sizeof err) == 0, "%s", err);
    /* batch 3 is the last that ran (records: 4 OOMs); batch 4 the simulated
     * allocator keeps inside the card only through its free-and-retry path
     * (tight), docs/validation.md */
    ck_assert_int_ge(est_sweep_last_fit(&s), 2);
    ck_assert_int_le(est_sweep_last_fit(&s), 3);
    est_sweep_measured *m = NULL;
    size_t nm = 0;
    ck_assert(est_sweep_measured_points(&s, test_repo_path("calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl"),
                                        &cat, &m, &nm, err, sizeof err) == 0);
    size_t ooms = 0;
    for (size_t i = 0; i < nm; i++) ooms += m[i].oom;
    ck_assert_uint_eq(ooms, 2); /* with and without expandable segments */
    char path[] = "/tmp/ftest-batch-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert(est_sweep_svg(path, &s, m, nm, err, sizeof err) == 0);
    char *t = test_slurp(path, NULL);
    char why[128];
    ck_assert_msg(xml_well_formed(t, why, sizeof why), "%s", why);
    ck_assert(strstr(t, "class=\"measured-oom\""));
    free(t);
    free(m);
    unlink(path);
    est_sweep_free(&s);
}
END_TEST

START_TEST(test_bad_ranges) {
    est_run r = gpjt_run();
    est_sweep s;
    char err[256];
    est_range back = {.start = 100, .stop = 10, .step = 1};
    ck_assert_int_eq(est_sweep_run(&r, EST_SWEEP_SEQ, back, NULL, &s, err, sizeof err), -1);
    /* Beyond the model's 32768 positions every point is invalid: an error, not an empty table. */
    est_range far = {.start = 40000, .stop = 50000, .step = 5000};
    ck_assert_int_eq(est_sweep_run(&r, EST_SWEEP_SEQ, far, NULL, &s, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "maximum"), "%s", err);
    /* Partly beyond: the valid points stay, the others are marked. */
    est_range part = {.start = 32000, .stop = 33000, .step = 500};
    ck_assert_int_eq(est_sweep_run(&r, EST_SWEEP_SEQ, part, NULL, &s, err, sizeof err), 0);
    ck_assert(s.pts[0].valid && s.pts[1].valid && !s.pts[2].valid);
    est_sweep_free(&s);
}
END_TEST

START_TEST(test_timeline_svg) {
    est_run r = gpjt_run();
    r.seq_len = 2048;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert(est_estimate_run(&r, &e, err, sizeof err) == 0);
    char path[] = "/tmp/ftest-timeline-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(est_timeline_svg(path, &r, &e, err, sizeof err) == 0, "%s", err);
    char *t = test_slurp(path, NULL);
    char why[128];
    ck_assert_msg(xml_well_formed(t, why, sizeof why), "%s", why);
    ck_assert(strstr(t, "id=\"series-activations\"") && strstr(t, "id=\"series-logits\""));
    ck_assert(strstr(t, "id=\"highlight\"") && strstr(t, "peak: "));
    ck_assert(strstr(t, ">forward<") && strstr(t, ">backward<") && strstr(t, ">optimizer<"));
    free(t);
    unlink(path);
    /* The text table marks the peak moment and lists every moment. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    est_print_timeline(f, &r, &e);
    fclose(f);
    size_t rows = 0;
    for (char *c = buf; *c; c++) rows += *c == '\n';
    ck_assert(strstr(buf, e.tl.phases[e.peak_index].label));
    ck_assert_uint_ge(rows, e.tl.count);
    free(buf);
    est_estimate_free(&e);
}
END_TEST

Suite *suite_sweep(void);
Suite *suite_sweep(void) {
    Suite *s = suite_create("sweep");
    TCase *tc = tcase_create("xml");
    tcase_add_test(tc, test_checker_rejects_broken_xml);
    suite_add_tcase(s, tc);
    tc = tcase_create("sweeps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_seq_sweep_table_csv_svg);
    tcase_add_test(tc, test_batch_sweep_with_oom_record);
    tcase_add_test(tc, test_bad_ranges);
    tcase_add_test(tc, test_timeline_svg);
    suite_add_tcase(s, tc);
    return s;
}
