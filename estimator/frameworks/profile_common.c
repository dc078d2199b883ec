#include "profiles.h"

void est_run_params(const est_run *run, est_params *p) {
    est_count_params(&run->model, run->layers_used, p);
}

int64_t est_shard(int64_t n, int64_t world) { return world > 0 ? (n + world - 1) / world : n; }
