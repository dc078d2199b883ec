#include "trainer_util.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

tr_config test_tr_config(const char *model) {
    tr_config c;
    char err[256];
    memset(&c, 0, sizeof c);
    ck_assert_msg(ft_model_load(model, &c.model, err, sizeof err) == 0, "%s", err);
    tr_config_defaults(&c);
    snprintf(c.model_arg, sizeof c.model_arg, "%s", model);
    c.quiet = true;
    return c;
}
