/* make bench: the caching allocator simulation (estimator/ledger/caching_allocator.c)
 * replaying 100,000 random allocations and frees, the figure of
 * docs/performance.md ("The caching allocator"). One estimate replays a few
 * thousand to a few tens of thousands of events and searches run hundreds of
 * estimates, so the budget is 1 ms per 10,000 operations (10 ms for the
 * 100,000); exit status 1 when a mode exceeds it.
 *
 * The traffic: up to 1,000 live tensors of log-uniform sizes from 512 bytes to
 * 64 MiB on one stream (every tenth free on a second stream via record_stream,
 * with that stream synced every 64 operations), a fixed seed, best of 7 runs.
 * Modes: PyTorch's defaults; expandable segments; max_split_size_mb:256; and
 * under pressure (a capacity of 4 GiB, so the free-and-retry path runs).
 *
 * Beside it, traffic shaped like a training step, nearer what the memory
 * ledger replays: 32 layers, each saving 6 tensors in forward (16, 16, 44, 44
 * and 4 MiB, 64 KiB) around 2 temporaries, and in backward allocating and
 * freeing 3 gradient temporaries before freeing its saved tensors: 704
 * operations a step, 3 steps, replayed 37 times (78,144 operations).
 * Timed on the thread's CPU clock, so that a busy shared machine (where other
 * processes take the core) does not inflate the figure. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "caching_allocator.h"

#define OPS 100000
#define LIVE 1000
#define BUDGET_S 0.010

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One replay; returns its seconds, or -1 on an unexpected status. */
static double replay(est_alloc *a, int64_t *ooms, int64_t *peak_reserved) {
    static est_alloc_handle live[LIVE];
    int n = 0;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    est_alloc_reset(a);
    double t0 = now_s();
    for (int op = 0; op < OPS; op++) {
        uint64_t r = next(&seed);
        int rc = EST_ALLOC_OK;
        if ((r % 2 == 0 && n < LIVE) || n == 0) {
            int64_t bytes = (int64_t)512 << (next(&seed) % 18);
            bytes += (int64_t)(next(&seed) % (uint64_t)bytes);
            rc = est_alloc_malloc(a, bytes, 0, &live[n]);
            if (rc == EST_ALLOC_OK) n++;
            else if (rc == EST_ALLOC_OOM) rc = EST_ALLOC_OK;
        } else {
            int k = (int)(next(&seed) % (uint64_t)n);
            rc = r % 10 == 1 ? est_alloc_release_pending(a, live[k], 1) : est_alloc_release(a, live[k]);
            live[k] = live[--n];
        }
        if (op % 64 == 0 && rc == EST_ALLOC_OK) rc = est_alloc_sync_stream(a, 1);
        if (rc != EST_ALLOC_OK) {
            fprintf(stderr, "bench_alloc: status %d: %s\n", rc, est_alloc_error(a));
            return -1;
        }
    }
    double t = now_s() - t0;
    est_alloc_stats s;
    est_alloc_stats_get(a, &s);
    *ooms = s.num_ooms;
    *peak_reserved = s.reserved_bytes[EST_ALLOC_ALL].peak;
    return t;
}

/* One replay of the step-shaped traffic; seconds, or -1. */
static double replay_steps(est_alloc *a, int64_t *ops) {
    static const int64_t saved[6] = {16 << 20, 16 << 20, 44 << 20, 44 << 20, 4 << 20, 64 << 10};
    static est_alloc_handle keep[32][6];
    est_alloc_handle t;
    int bad = 0;
    *ops = 0;
    est_alloc_reset(a);
    double t0 = now_s();
    for (int rep = 0; rep < 37; rep++)
        for (int step = 0; step < 3; step++) {
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < 6; i++) {
                    if (i == 2 || i == 4) {
                        bad |= est_alloc_malloc(a, 88 << 20, 0, &t) | est_alloc_release(a, t);
                        *ops += 2;
                    }
                    bad |= est_alloc_malloc(a, saved[i], 0, &keep[l][i]);
                    *ops += 1;
                }
            for (int l = 31; l >= 0; l--) {
                for (int i = 0; i < 3; i++) {
                    bad |= est_alloc_malloc(a, saved[2 * i], 0, &t) | est_alloc_release(a, t);
                    *ops += 2;
                }
                for (int i = 5; i >= 0; i--) bad |= est_alloc_release(a, keep[l][i]);
                *ops += 6;
            }
        }
    double el = now_s() - t0;
    return bad ? -1 : el;
}

static int step_mode(void) {
    est_alloc_config c;
    est_alloc_config_default(&c);
    char err[256];
    est_alloc *a = est_alloc_new(&c, err, sizeof err);
    if (!a) return 2;
    double best = 1e9;
    int64_t ops = 0;
    for (int run = 0; run < 7; run++) {
        double t = replay_steps(a, &ops);
        if (t < 0) {
            fprintf(stderr, "bench_alloc: %s\n", est_alloc_error(a));
            return 2;
        }
        if (t < best) best = t;
    }
    est_alloc_stats s;
    est_alloc_stats_get(a, &s);
    printf("  %-28s %7.2f ms  (%5.1f ns per operation, %lld operations; peak reserved %.2f GiB)\n",
           "step-shaped, defaults", 1e3 * best, 1e9 * best / (double)ops, (long long)ops,
           (double)s.reserved_bytes[EST_ALLOC_ALL].peak / (1 << 30));
    est_alloc_free(a);
    return best > BUDGET_S * (double)ops / OPS;
}

int main(void) {
    struct {
        const char *name;
        bool expandable;
        int64_t max_split, capacity;
    } modes[] = {
        {"defaults", false, 0, 0},
        {"expandable_segments:True", true, 0, 0},
        {"max_split_size_mb:256", false, 256LL << 20, 0},
        {"capacity 4 GiB (pressure)", false, 0, 4LL << 30},
    };
    int over = 0;
    printf("caching allocator: %d random mallocs and frees, up to %d live tensors, best of 7\n", OPS, LIVE);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        est_alloc_config c;
        est_alloc_config_default(&c);
        c.expandable_segments = modes[m].expandable;
        c.max_split_size_bytes = modes[m].max_split;
        c.capacity_bytes = modes[m].capacity;
        char err[256];
        est_alloc *a = est_alloc_new(&c, err, sizeof err);
        if (!a) {
            fprintf(stderr, "bench_alloc: %s\n", err);
            return 2;
        }
        double best = 1e9;
        int64_t ooms = 0, peak = 0;
        for (int run = 0; run < 7; run++) {
            double t = replay(a, &ooms, &peak);
            if (t < 0) return 2;
            if (t < best) best = t;
        }
        printf("  %-28s %7.2f ms  (%5.1f ns per operation; peak reserved %.1f GiB, %lld out of memory)\n",
               modes[m].name, 1e3 * best, 1e9 * best / OPS, (double)peak / (1 << 30), (long long)ooms);
        if (best > BUDGET_S) over = 1;
        est_alloc_free(a);
    }
    over |= step_mode();
    if (over) fprintf(stderr, "bench_alloc: over the budget of %.0f ms per %d operations\n", 1e3 * BUDGET_S, OPS);
    return over;
}
