#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_io.h"
#include "json_util.h"

int tr_map_file(const char *path, const char *what, const unsigned char **map, size_t *len, char *err,
                size_t errlen) {
    *map = NULL;
    *len = 0;
    /* stat first and open non-blocking (ft_open_input): a FIFO named as a data
     * file is refused instead of hanging the run. Mapped, never copied: the
     * cap is only what a 64-bit address space maps comfortably. */
    size_t size = 0;
    int fd = ft_open_input(path, what, (size_t)1 << 40, &size, err, errlen);
    if (fd < 0) return -1;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ft_errorf(err, errlen, "cannot map %s%s: %s", what, path, strerror(e));
        }
        *map = m;
        *len = size;
    }
    close(fd);
    return 0;
}

void tr_unmap_file(const unsigned char *map, size_t len) {
    if (map) munmap((void *)map, len);
}
