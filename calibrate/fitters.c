#include "fitters.h"

#include <stdlib.h>

void cal_put(cJSON *section, const char *name, double value, const char *source) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "value", value);
    cJSON_AddStringToObject(o, "source", source);
    cJSON_DeleteItemFromObjectCaseSensitive(section, name);
    cJSON_AddItemToObject(section, name, o);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void cal_sort(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, cmp_double);
}
