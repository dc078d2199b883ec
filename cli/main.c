/* ftest: will this fine-tune fit, and on what? The command-line front end;
 * only this file chooses exit statuses (0 fits/passed, 1 does not fit/failed,
 * 2 bad input). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_records.h"
#include "commands.h"
#include "cli_run.h"
#include "constants.h"
#include "cublas_ws.h"
#include "device_mem.h"
#include "deepspeed_estimator.h"
#include "estimate.h"
#include "calibrate.h"
#include "file_io.h"
#include "fit.h"
#include "fw_registry.h"
#include "inverse.h"
#include "json_util.h"
#include "option_use.h"
#include "options.h"
#include "stack.h"
#include "params.h"
#include "advice.h"
#include "report.h"
#include "strategy.h"
#include "timing.h"

#define EXIT_FITS 0
#define EXIT_NO_FIT 1
#define EXIT_BAD_INPUT 2

/* Output that could not be written (a full disk, a closed pipe, /dev/full) is
 * a failure, never a silent success: exit 2. */
static int finish_stdout(int status) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ftest: cannot write the output: %s\n", strerror(errno ? errno : EIO));
        return EXIT_BAD_INPUT;
    }
    return status;
}

static int bad_input(const char *msg) {
    fprintf(stderr, "ftest: %s\n", msg);
    return EXIT_BAD_INPUT;
}

static int cmd_models(void) {
    char names[256][FT_NAME_MAX], err[256];
    int n = ft_model_names(names, 256, err, sizeof err);
    if (n < 0) return bad_input(err);
    printf("%-20s %16s %7s %7s %6s %7s  %s\n", "model", "parameters", "layers", "hidden", "heads",
           "vocab", "source");
    for (int i = 0; i < n; i++) {
        ft_model m;
        if (ft_model_load(names[i], &m, err, sizeof err) < 0) {
            printf("%-20s (unreadable: %s)\n", names[i], err);
            continue;
        }
        est_params p;
        est_count_params(&m, m.num_layers, &p);
        printf("%-20s %16lld %7lld %7lld %3lld/%-2lld %7lld  %s\n", names[i], (long long)p.total,
               (long long)m.num_layers, (long long)m.hidden_size, (long long)m.num_heads,
               (long long)m.num_kv_heads, (long long)m.vocab_size, m.hf_repo);
    }
    return EXIT_FITS;
}

static int cmd_gpus(const est_gpu_catalog *cat) {
    printf("%-16s %-30s %9s %8s %8s %8s %8s\n", "gpu", "name", "memory", "bf16", "fp32", "HBM",
           "NVLink");
    printf("%-16s %-30s %9s %8s %8s %8s %8s\n", "", "", "GiB", "TFLOP/s", "TFLOP/s", "GB/s", "GB/s");
    for (size_t i = 0; i < cat->count; i++) {
        const est_gpu *g = &cat->gpus[i];
        printf("%-16s %-30s %9.2f %8.1f %8.1f %8.0f %8.0f\n", g->name, g->display,
               (double)g->memory_bytes / 1073741824.0, g->bf16_tflops, g->fp32_tflops,
               g->hbm_gb_per_s, g->nvlink_gb_per_s);
    }
    return EXIT_FITS;
}

static int cmd_check(const est_cli *cli, const est_gpu_catalog *cat) {
    est_check_totals tot = {0};
    est_check_options opt = {.quiet = cli->quiet, .markdown = cli->markdown, .diag = stderr};
    for (int i = 0; i < cli->nfiles; i++) {
        char err[256];
        if (est_check_file(cli->files[i], cat, &opt, stdout, &tot, err, sizeof err) < 0)
            return bad_input(err);
    }
    if (!cli->markdown) {
        printf("\n%zu records, %zu outside tolerance, %zu unreadable", tot.records, tot.failed, tot.errors);
        if (tot.partial) printf(", %zu window records of ftrain runs not compared", tot.partial);
        if (tot.not_expressible) printf(", %zu not expressible yet", tot.not_expressible);
        printf("\n");
    }
    if (tot.errors) {
        fprintf(stderr, "ftest: %zu unreadable record%s (see the ERROR lines above)\n", tot.errors,
                tot.errors == 1 ? "" : "s");
        return EXIT_BAD_INPUT;
    }
    if (tot.records == 0 && tot.not_expressible == 0) return bad_input("no complete record to check (only window records of runs "
                                           "that did not finish)");
    return tot.failed ? EXIT_NO_FIT : EXIT_FITS;
}

static int cmd_constants(const est_cli *cli, const est_gpu_catalog *cat) {
    est_framework fw = cli->framework_set ? cli->framework : est_fw_default();
    const char *gname = cli->gpu[0] ? cli->gpu : EST_DEFAULT_GPU;
    const est_gpu *gpu = est_gpu_find(cat, gname);
    if (!gpu) {
        char msg[256];
        est_gpu_unknown(cat, gname, msg, sizeof msg);
        return bad_input(msg);
    }
    est_constants k;
    char err[256];
    if (est_constants_for(est_framework_name(fw), gpu->name, &k, err, sizeof err) < 0) return bad_input(err);
    est_cublas_workspace_in_force(gpu, &k);
    est_cuda_context_in_force(gpu, &k);
    printf("constants for %s on %s\n", est_framework_name(fw), gpu->name);
    for (int i = 0; i < EST_K_COUNT; i++)
        printf("  %-36s %14.6g %-9s %s\n", est_constant_name((est_constant_id)i), k.value[i],
               est_constant_unit((est_constant_id)i), k.source[i]);
    return EXIT_FITS;
}

/* The output folder is always named: fit never overwrites the committed
 * calibrate/profiles by default. The set is committed as one (fit.h). */
static int cmd_fit(const est_cli *cli, const est_gpu_catalog *cat) {
    char err[512], names[256];
    if (!cli->out[0])
        return bad_input("fit needs --out DIR (the profile set is replaced as a whole; to update the "
                         "shipped one, name calibrate/profiles)");
    /* A set that determines nothing is refused rather than "fitted" (calibrate_fitguard.h). */
    if (cal_fit_guard((char(*)[1024])cli->files, cli->nfiles, cat, err, sizeof err) < 0)
        return bad_input(err);
    /* The folder is judged before the fit's work (file_io.h: a link, or a
     * folder holding anything but profiles, is refused). */
    if (ft_check_replaceable_dir(cli->out, err, sizeof err) < 0) return bad_input(err);
    int n = cal_fit_files((char(*)[1024])cli->files, cli->nfiles, cat, cli->out, stdout, names,
                          sizeof names, err, sizeof err);
    if (n < 0) return bad_input(err);
    if (n == 0) return bad_input("no profile could be fitted from these records; nothing written");
    printf("%d profile%s written to %s: %s\n", n, n == 1 ? "" : "s", cli->out, names);
    return EXIT_FITS;
}

static int print_json(const est_run *run, const est_estimate *e, const est_alternative *alts,
                      size_t n, int rec, const est_advice *advice) {
    char *s = est_json_report_advice(run, e, alts, n, rec, advice);
    if (!s) return bad_input("out of memory");
    puts(s);
    free(s);
    return EXIT_FITS;
}

/* The recommended strategy (said to be tight when every fit is), or what to
 * try when nothing fits. */
static void print_recommendation(const est_run *run, const est_alternative *alts, int rec, int shown) {
    if (rec >= 0 && alts[rec].tight)
        printf("\nrecommended: %s (the fastest that fits; every strategy that fits is tight)\n",
               alts[rec].strategy.label);
    else if (rec >= 0)
        printf("\nrecommended: %s (the fastest that fits)\n", alts[rec].strategy.label);
    else
        printf("\nnothing fits on %lld x %s; the least memory is %s, shown below.\n"
               "try more GPUs (--gpus, --nodes), a larger --gpu, a shorter --seq.\n",
               (long long)est_run_world(run), run->gpu.display, alts[shown].strategy.label);
}

static int cmd_estimate(const est_cli *cli, const est_gpu_catalog *cat) {
    char err[256];
    est_run run;
    if (est_cli_build_run(cli, cat, &run, err, sizeof err) < 0) return bad_input(err);
    if (cli->deepspeed_table) {
        est_ds_print_tables(stdout, &run.model, run.gpus_per_node, run.nodes);
        return EXIT_FITS;
    }
    if (cli->max_batch || cli->max_seq || cli->min_gpus) { /* inverse.h */
        int rc = est_inverse_command(cli, &run, stdout, err, sizeof err);
        return rc < 0 ? bad_input(err) : rc == 0 ? EXIT_FITS : EXIT_NO_FIT;
    }
    est_estimate e;
    est_estimate_init(&e);
    e.tight_margin_frac = run.tight_margin_frac; /* --tight-margin (cli_run.c) */
    est_advice *advice = calloc(1, sizeof *advice); /* what would fit, when it does not (advice.h) */
    if (!advice) {
        est_estimate_free(&e);
        return bad_input("out of memory");
    }
    int status;
    if (est_cli_strategy_given(cli)) {
        if (est_estimate_run(&run, &e, err, sizeof err) < 0) {
            est_estimate_free(&e);
            free(advice);
            return bad_input(err);
        }
        if (!e.fits) est_advise(&run, e.tight_margin_frac, advice, err, sizeof err);
        if (cli->json) print_json(&run, &e, NULL, 0, -1, e.fits ? NULL : advice);
        else {
            est_print_run(stdout, &run);
            est_print_estimate(stdout, &run, &e);
            if (!e.fits) est_print_advice(stdout, advice);
            if (cli->tokens_set) est_print_tokens_time(stdout, &run, &e, cli->tokens * cli->epochs);
        }
        status = e.fits ? EXIT_FITS : EXIT_NO_FIT;
    } else {
        est_alternative alts[EST_MAX_STRATEGIES];
        size_t n = est_evaluate_strategies(&run, alts);
        int rec = est_recommend(alts, n);
        /* Detail the recommendation, or the strategy using the least memory. */
        int shown = rec >= 0 ? rec : est_least_memory(alts, n);
        if (shown < 0) {
            est_estimate_free(&e);
            free(advice);
            return bad_input(alts[0].why);
        }
        est_run chosen;
        est_strategy_apply(&alts[shown].strategy, &run, &chosen);
        if (est_estimate_run(&chosen, &e, err, sizeof err) < 0) {
            est_estimate_free(&e);
            free(advice);
            return bad_input(err);
        }
        if (rec < 0) est_advise(&chosen, e.tight_margin_frac, advice, err, sizeof err);
        if (cli->json) {
            print_json(&chosen, &e, alts, n, rec, rec < 0 ? advice : NULL);
        } else {
            est_print_run(stdout, &chosen);
            print_recommendation(&run, alts, rec, shown);
            est_print_estimate(stdout, &chosen, &e);
            if (rec < 0) est_print_advice(stdout, advice);
            if (cli->tokens_set) est_print_tokens_time(stdout, &chosen, &e, cli->tokens * cli->epochs);
            est_alternatives_fit_gpus(&run, alts, n, cat);
            est_print_alternatives(stdout, alts, n, rec);
        }
        status = rec >= 0 ? EXIT_FITS : EXIT_NO_FIT;
    }
    est_estimate_free(&e);
    free(advice);
    return status;
}

/* Can `path` (an output named by `opt`) be written? Asked before any work, so
 * a typo in a folder name costs nothing and prints nothing else: an existing
 * file must be writable and not a folder; a new file needs a writable folder. */
static int output_writable(const char *opt, const char *path, char *err, size_t errlen) {
    if (!path[0] || !strcmp(path, "-")) return 0;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return ft_errorf(err, errlen, "%s %.200s: is a folder", opt, path);
        if (access(path, W_OK) != 0) return ft_errorf(err, errlen, "%s %.200s: cannot write it", opt, path);
        return 0;
    }
    char dir[EST_PATH_MAX];
    ft_strlcpy(dir, path, sizeof dir);
    char *slash = strrchr(dir, '/');
    if (!slash) ft_strlcpy(dir, ".", sizeof dir);
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ft_errorf(err, errlen, "%s %.200s: the folder %.200s does not exist", opt, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return ft_errorf(err, errlen, "%s %.200s: cannot create files in %.200s", opt, path, dir);
    return 0;
}

/* The folder of `path` resolved (realpath) and its last name: two paths
 * naming one file, existing or not, give the same pair. */
static bool resolve_parent(const char *path, char *dir, const char **base) {
    char tmp[EST_PATH_MAX];
    ft_strlcpy(tmp, path, sizeof tmp);
    char *slash = strrchr(tmp, '/');
    *base = slash ? path + (slash - tmp) + 1 : path;
    if (!slash) ft_strlcpy(tmp, ".", sizeof tmp);
    else if (slash == tmp) tmp[1] = '\0';
    else *slash = '\0';
    return realpath(tmp, dir) != NULL;
}

/* Do two output paths name one file? One would overwrite the other. */
static bool same_output(const char *a, const char *b) {
    if (!a[0] || !b[0] || !strcmp(a, "-") || !strcmp(b, "-")) return false;
    if (!strcmp(a, b)) return true;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char da[PATH_MAX], db[PATH_MAX];
    const char *ba, *bb;
    return resolve_parent(a, da, &ba) && resolve_parent(b, db, &bb) && !strcmp(da, db) && !strcmp(ba, bb);
}

/* The outputs named: each writable, no two the same file, and at most one
 * on standard output. */
static int outputs_ok(const est_cli *cli, char *err, size_t errlen) {
    if (same_output(cli->csv, cli->svg))
        return ft_errorf(err, errlen, "--csv and --svg both name %.200s; one would overwrite the other", cli->csv);
    if (!strcmp(cli->csv, "-") && cli->json)
        return ft_errorf(err, errlen, "--csv - and --json both write to standard output; give --csv a file");
    if (output_writable("--csv", cli->csv, err, errlen) < 0 || output_writable("--svg", cli->svg, err, errlen) < 0)
        return -1;
    return 0;
}

/* `ftest calibrate` has options of its own (calibrate/calibrate_options.c). */
static int cmd_calibrate(int argc, char **argv) {
    cal_options *o = calloc(1, sizeof *o);
    if (!o) return bad_input("out of memory");
    char err[256];
    if (cal_options_parse(argc, argv, o, err, sizeof err) < 0) {
        free(o);
        return bad_input(err);
    }
    if (o->help) {
        fputs(cal_usage, stdout);
        free(o);
        return finish_stdout(EXIT_FITS);
    }
    est_gpu_catalog cat = {0};
    if (est_gpu_catalog_load(NULL, &cat, err, sizeof err) < 0) {
        free(o);
        return bad_input(err);
    }
    cal_summary sum;
    int rc = cal_calibrate(o, &cat, stdout, stderr, &sum, err, sizeof err);
    est_gpu_catalog_free(&cat);
    free(o);
    if (rc < 0) return bad_input(err);
    if (sum.interrupted) return finish_stdout(130); /* as a shell reports SIGINT */
    /* A point that failed measured nothing: never a silent success. */
    if (sum.failed)
        fprintf(stderr, "ftest: %zu point%s failed (first: %s); a failed point is not marked done, so a "
                        "rerun measures it again\n", sum.failed, sum.failed == 1 ? "" : "s", sum.first_failure);
    return finish_stdout(sum.failed || sum.check_failed || sum.check_errors ? EXIT_NO_FIT : EXIT_FITS);
}

int main(int argc, char **argv) {
    /* A file-size limit (ulimit -f) makes a write fail with EFBIG, which every
     * output handles (the old file kept, the temporary removed, exit 2),
     * instead of killing ftest with a temporary file left behind. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc > 1 && argv[1] && !strcmp(argv[1], "calibrate")) return cmd_calibrate(argc - 1, argv + 1);
    est_cli *cli = calloc(1, sizeof *cli);
    if (!cli) return bad_input("out of memory");
    char err[256];
    int status;
    if (est_cli_parse(argc, argv, cli, err, sizeof err) < 0) {
        free(cli);
        fprintf(stderr, "ftest: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    if (cli->help || argc == 1) {
        fputs(est_usage, stdout);
        free(cli);
        return finish_stdout(EXIT_FITS);
    }
    if (cli->version) {
        puts("ftest 0.1");
        free(cli);
        return finish_stdout(EXIT_FITS);
    }
    if (est_cli_check_used(cli, err, sizeof err) < 0) {
        free(cli);
        return bad_input(err);
    }
    if (outputs_ok(cli, err, sizeof err) < 0) {
        free(cli);
        return bad_input(err);
    }
    est_constants_use_profiles(!cli->no_profile);
    est_gpu_catalog cat = {0};
    if (est_gpu_catalog_load(NULL, &cat, err, sizeof err) < 0) {
        free(cli);
        return bad_input(err);
    }
    /* Every profile that could be used must load: strategy searches would
     * otherwise drop a framework whose profile is broken without a word. */
    if (cli->command != EST_CMD_MODELS && cli->command != EST_CMD_GPUS && cli->command != EST_CMD_FIT) {
        est_constants k;
        const est_framework *fws;
        const size_t nfw = est_fw_all(&fws);
        for (size_t i = 0; i < nfw; i++)
            if (est_constants_for(est_framework_name(fws[i]), cli->gpu[0] ? cli->gpu : EST_DEFAULT_GPU, &k, err, sizeof err) < 0) {
                est_gpu_catalog_free(&cat);
                free(cli);
                return bad_input(err);
            }
    }
    switch (cli->command) {
    case EST_CMD_MODELS: status = cmd_models(); break;
    case EST_CMD_GPUS: status = cmd_gpus(&cat); break;
    case EST_CMD_STACKS: est_stacks_print(stdout); status = EXIT_FITS; break;
    case EST_CMD_CHECK: status = cmd_check(cli, &cat); break;
    case EST_CMD_CONSTANTS: status = cmd_constants(cli, &cat); break;
    case EST_CMD_FIT: status = cmd_fit(cli, &cat); break;
    case EST_CMD_ESTIMATE: status = cmd_estimate(cli, &cat); break;
    case EST_CMD_SWEEP:
    case EST_CMD_TIMELINE:
    case EST_CMD_PLAN: { /* commands.h: 0 fits, 1 does not, -1 bad input */
        int rc = est_run_command(cli, &cat, stdout, err, sizeof err);
        status = rc < 0 ? bad_input(err) : rc == 0 ? EXIT_FITS : EXIT_NO_FIT;
        break;
    }
    default: status = bad_input("this command is not built yet"); break;
    }
    est_gpu_catalog_free(&cat);
    free(cli);
    return finish_stdout(status);
}
