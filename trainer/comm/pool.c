/* The thread pool behind tr_par_for (parallel.h).
 *
 * One process-wide list of jobs under one mutex. A job is a loop split into
 * chunks of contiguous iterations; its submitter runs chunks too and then
 * waits for the last one. Workers sleep on `work_cv` until a job has chunks
 * left and room for another helper (a job takes at most team - 1 helpers, so
 * ranks running side by side each get their share). Nothing spins: an idle
 * worker costs nothing, which matters on a machine shared with other work.
 *
 * The pool survives fork (Check runs each test in a child): the child has
 * none of the parent's workers, so an atfork handler empties it there. */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "cpus.h"
#include "parallel.h"

/* Chunks per team member: a few, so causal attention's uneven rows balance. */
#define CHUNKS_PER_THREAD 4
#define MAX_WORKERS 1023

typedef struct job {
    tr_range_fn fn;
    void *ctx;
    int64_t n, nchunks;
    int64_t next;            /* next chunk to claim */
    int64_t done;            /* chunks finished */
    int helpers, max_helpers;
    struct job *link;
} job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    job *jobs;               /* jobs with chunks left or running */
    int workers;
    int default_team;        /* 0 until the CPUs were counted */
    bool atfork;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, false};

static _Thread_local int team; /* 0: the process default */

static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static void count_cpus(void) { pool.default_team = tr_cpus_detect().available; }

int tr_max_threads(void) {
    if (team > 0) return team;
    pthread_once(&cpus_once, count_cpus);
    return pool.default_team;
}

void tr_set_threads(int n) { team = n > 0 ? n : 1; }

/* Runs claimed chunks of j until none is left; called and returns with mu held. */
static void run_chunks(job *j) {
    while (j->next < j->nchunks) {
        int64_t c = j->next++;
        int64_t i0 = j->n * c / j->nchunks, i1 = j->n * (c + 1) / j->nchunks;
        pthread_mutex_unlock(&pool.mu);
        j->fn(j->ctx, i0, i1);
        pthread_mutex_lock(&pool.mu);
        if (++j->done == j->nchunks) pthread_cond_broadcast(&pool.done_cv);
    }
}

static job *claimable(void) {
    for (job *j = pool.jobs; j; j = j->link)
        if (j->next < j->nchunks && j->helpers < j->max_helpers) return j;
    return NULL;
}

static void *worker_main(void *arg) {
    (void)arg;
    team = 1;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        job *j = claimable();
        if (!j) {
            pthread_cond_wait(&pool.work_cv, &pool.mu);
            continue;
        }
        j->helpers++;
        run_chunks(j);
        j->helpers--;
    }
    return NULL; /* not reached: workers live as long as the process */
}

static void after_fork_child(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.work_cv, NULL);
    pthread_cond_init(&pool.done_cv, NULL);
    pool.jobs = NULL;
    pool.workers = 0;
}

/* Starts workers up to `want` (mu held); a failed start leaves fewer, which
 * only means less help. */
static void grow(int want) {
    if (!pool.atfork) {
        pthread_atfork(NULL, NULL, after_fork_child);
        pool.atfork = true;
    }
    if (want > MAX_WORKERS) want = MAX_WORKERS;
    while (pool.workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc) break;
        pool.workers++;
    }
}

void tr_par_for(int64_t n, int64_t work, tr_range_fn fn, void *ctx) {
    if (n <= 0) return;
    const int threads = tr_max_threads();
    if (threads <= 1 || n == 1 || work < TR_PAR_MIN_WORK) {
        fn(ctx, 0, n);
        return;
    }
    int64_t nchunks = (int64_t)threads * CHUNKS_PER_THREAD;
    if (nchunks > n) nchunks = n;
    job j = {fn, ctx, n, nchunks, 0, 0, 0, threads - 1, NULL};
    pthread_mutex_lock(&pool.mu);
    grow(threads - 1);
    j.link = pool.jobs;
    pool.jobs = &j;
    pthread_cond_broadcast(&pool.work_cv);
    run_chunks(&j);
    while (j.done < j.nchunks) pthread_cond_wait(&pool.done_cv, &pool.mu);
    for (job **p = &pool.jobs; *p; p = &(*p)->link)
        if (*p == &j) {
            *p = j.link;
            break;
        }
    pthread_mutex_unlock(&pool.mu);
}
