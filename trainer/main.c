/* ftrain: the reference trainer. Parses flags, trains, writes the record.
 * Exit 0 trained, 1 out of memory (written to the record as oom), 2 bad input. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "record_writer.h"
#include "train.h"

int main(int argc, char **argv) {
    static tr_config cfg;
    char err[512];
    bool help = false;
    if (tr_cli_parse(argc, argv, &cfg, &help, err, sizeof err)) {
        fprintf(stderr, "ftrain: %s\n", err);
        return 2;
    }
    if (help) {
        tr_cli_usage(stdout);
        return 0;
    }
    if (cfg.record_path[0]) { /* fail before training, not after */
        FILE *f = fopen(cfg.record_path, "a");
        if (!f) {
            fprintf(stderr, "ftrain: cannot open record file %s for appending\n", cfg.record_path);
            return 2;
        }
        fclose(f);
    }
    tr_result res;
    int rc = tr_train(&cfg, &res, err, sizeof err);
    if (rc && !res.oom) {
        fprintf(stderr, "ftrain: %s\n", err);
        tr_result_free(&res);
        return 2;
    }
    int status = 0;
    if (rc) {
        fprintf(stderr, "ftrain: %s\n", err);
        status = 1;
    } else if (!cfg.quiet) {
        fprintf(stderr, "ftrain: %lld params, rank 0 peak %lld bytes at \"%s\", %.1f tokens/s\n",
                (long long)res.params_numel, (long long)res.rank[0].peak_total, res.rank[0].peak_phase,
                res.tokens_per_s);
    }
    if (cfg.record_path[0] && tr_record_append(cfg.record_path, &cfg, &res, err, sizeof err)) {
        fprintf(stderr, "ftrain: %s\n", err);
        status = 2;
    }
    tr_result_free(&res);
    return status;
}
