#include "option_use.h"

#include "json_util.h"

/* Commands as a bit set. */
#define C(cmd) (1u << (cmd))

static const char *command_name(est_command c) {
    switch (c) {
    case EST_CMD_ESTIMATE: return "the estimate";
    case EST_CMD_MODELS: return "models";
    case EST_CMD_GPUS: return "gpus";
    case EST_CMD_CHECK: return "check";
    case EST_CMD_CONSTANTS: return "constants";
    case EST_CMD_SWEEP: return "sweep";
    case EST_CMD_TIMELINE: return "timeline";
    case EST_CMD_PLAN: return "plan";
    case EST_CMD_FIT: return "fit";
    case EST_CMD_STACKS: return "stacks";
    }
    return "this command";
}

int est_cli_check_used(const est_cli *cli, char *err, size_t errlen) {
    const struct {
        const char *flag;
        bool given;
        unsigned used_by;
        const char *users;
    } opts[] = {
        {"--csv", cli->csv[0] != '\0', C(EST_CMD_SWEEP), "sweep"},
        {"--svg", cli->svg[0] != '\0', C(EST_CMD_SWEEP) | C(EST_CMD_TIMELINE), "sweep, timeline"},
        {"--records", cli->records_file[0] != '\0', C(EST_CMD_SWEEP), "sweep"},
        {"--catalog", cli->catalog[0] != '\0', C(EST_CMD_PLAN), "plan"},
        {"--out", cli->out[0] != '\0', C(EST_CMD_FIT), "fit"},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i].given && !(opts[i].used_by & C(cli->command)))
            return ft_errorf(err, errlen, "%s does nothing for %s (it is used by: %s)", opts[i].flag,
                             command_name(cli->command), opts[i].users);
    return 0;
}
