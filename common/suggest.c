#include "suggest.h"

#include <ctype.h>
#include <limits.h>
#include <strings.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define CAP 64

int ft_edit_distance(const char *a, const char *b) {
    int la = (int)strnlen(a, CAP), lb = (int)strnlen(b, CAP);
    int prev[CAP + 1], cur[CAP + 1];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

static bool contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return false;
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return true;
    return false;
}

/* Lower is closer; INT_MAX is "not close". A prefix beats any edit; a name
 * containing the query comes next; otherwise the edit distance when it is at
 * most a third of the query (at least 1, at most 3), so "--jsn" finds
 * "--json" but "x" does not find "h100-80gb". */
static int score(const char *query, const char *name) {
    size_t q = strlen(query);
    if (q && !strncasecmp(name, query, q)) return 0;
    if (q >= 3 && contains_ci(name, query)) return 1;
    int d = ft_edit_distance(query, name);
    int allowed = (int)(q / 3);
    if (allowed < 1) allowed = 1;
    if (allowed > 3) allowed = 3;
    return d <= allowed ? 1 + d : INT_MAX;
}

size_t ft_suggest_close(const char *query, const char *const *names, size_t n, char *out,
                        size_t outlen) {
    size_t best[FT_SUGGEST_MAX];
    int dist[FT_SUGGEST_MAX];
    size_t nb = 0;
    if (outlen) out[0] = '\0';
    if (!query || !names) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) continue;
        int d = score(query, names[i]);
        if (d == INT_MAX) continue;
        bool dup = false; /* aliases may repeat a name */
        for (size_t k = 0; k < nb; k++) dup |= !strcmp(names[best[k]], names[i]);
        if (dup) continue;
        size_t k = nb < FT_SUGGEST_MAX ? nb++ : FT_SUGGEST_MAX;
        /* Insertion keeps the list ordered; equal scores keep list order. */
        while (k > 0 && dist[k - 1] > d) {
            if (k < FT_SUGGEST_MAX) best[k] = best[k - 1], dist[k] = dist[k - 1];
            k--;
        }
        if (k < FT_SUGGEST_MAX) best[k] = i, dist[k] = d;
    }
    /* Names that begin with the query say what it was short for (fp16 ->
     * fp16-mixed): then only they are offered, not the names a letter away
     * (bf16), which mean something else. */
    if (nb > 0 && dist[0] == 0)
        while (nb > 1 && dist[nb - 1] > 0) nb--;
    size_t used = 0;
    for (size_t k = 0; k < nb && outlen; k++) {
        const char *sep = k == 0 ? "" : k + 1 == nb ? " or " : ", ";
        int w = snprintf(out + used, outlen - used, "%s%s", sep, names[best[k]]);
        if (w < 0 || (size_t)w >= outlen - used) {
            out[used] = '\0';
            return k;
        }
        used += (size_t)w;
    }
    return nb;
}
