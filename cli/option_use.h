/* Options that a command would ignore are refused by name: a flag that does
 * nothing must never look as if it had worked (`timeline --csv` writing no
 * file, `--records` on a plain estimate). */
#ifndef EST_OPTION_USE_H
#define EST_OPTION_USE_H

#include <stddef.h>

#include "options.h"

/* 0 when every file option given is used by cli->command, else -1 with
 * "--csv does nothing for timeline (it is used by: sweep)". */
int est_cli_check_used(const est_cli *cli, char *err, size_t errlen);

#endif
