#include "memory_ledger.h"

#include <string.h>

#include "json_util.h"

/* A span's row holds the highest point reached while it is open: `alloc` is
 * the allocator-visible sum of `live`, `row_alloc` the row's so far. Only an
 * allocation raises a category, so its own maximum is the one to look at. */
static void span_update(est_timeline *tl, size_t row, const int64_t live[EST_CAT_COUNT], est_category c,
                        int64_t alloc, int64_t *row_alloc) {
    est_phase *p = &tl->phases[row];
    if (alloc > *row_alloc) {
        memcpy(p->bytes, live, sizeof p->bytes);
        *row_alloc = alloc;
    }
    if (live[c] > p->own_max[c]) p->own_max[c] = live[c];
}

int est_memory_ledger(const est_step *st, est_timeline *tl, char *err, size_t errlen) {
    est_timeline_clear(tl);
    if (st->oom) return ft_errorf(err, errlen, "out of memory building the step");
    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    int64_t alloc = 0, row_alloc = 0; /* the categories an allocator counts: now, and the row's */
    bool span_open = false;
    size_t span_row = 0;
    for (size_t i = 0; i < st->count; i++) {
        const est_event *e = &st->events[i];
        switch (e->kind) {
        case EST_EV_ALLOC: {
            const est_category c = e->u.mem.category;
            live[c] += e->u.mem.bytes;
            if (c < EST_CAT_ALLOCATED_COUNT) alloc += e->u.mem.bytes;
            if (span_open) span_update(tl, span_row, live, c, alloc, &row_alloc);
            break;
        }
        case EST_EV_FREE: {
            const est_category c = e->u.mem.category;
            live[c] -= e->u.mem.bytes;
            if (c < EST_CAT_ALLOCATED_COUNT) alloc -= e->u.mem.bytes;
            break;
        }
        case EST_EV_MOMENT:
            if (!est_timeline_push(tl, e->u.moment.phase, e->u.moment.layer, e->u.moment.label, live))
                return ft_errorf(err, errlen, "out of memory building the timeline");
            span_open = e->u.moment.span;
            span_row = tl->count - 1;
            row_alloc = alloc;
            break;
        default: break; /* work: the time ledger's */
        }
    }
    tl->cpu_bytes = st->cpu_bytes;
    tl->cpu_load_bytes = st->cpu_load_bytes;
    tl->rank_spread_bytes = st->rank_spread_bytes;
    return 0;
}
