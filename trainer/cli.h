/* ftrain's command line: parsing into a tr_config (strict: every value checked,
 * unknown flags rejected) and the --help text that documents every flag. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* Parses argv (argv[0] is the program). Loads the model config. On success the
 * configuration is validated. 0, or -1 with one line in err. *help is set
 * when --help was asked (cfg is then not filled). */
int tr_cli_parse(int argc, char **argv, tr_config *cfg, bool *help, char *err, size_t errlen);
void tr_cli_usage(FILE *out);

#endif
