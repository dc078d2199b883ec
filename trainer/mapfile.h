/* Read-only mapping of a whole regular file (token files, safetensors), so
 * large inputs are paged in as they are read, never copied. */
#ifndef TR_MAPFILE_H
#define TR_MAPFILE_H

#include <stddef.h>

/* Maps `path`; an empty file gives *map NULL and *len 0. `what` prefixes the
 * path in messages ("data file " gives "cannot open data file PATH: ...").
 * 0, or -1 with one line in err (cannot open / not a regular file / cannot map). */
int tr_map_file(const char *path, const char *what, const unsigned char **map, size_t *len, char *err,
                size_t errlen);
/* Unmaps what tr_map_file returned (NULL is fine). */
void tr_unmap_file(const unsigned char *map, size_t len);

#endif
