#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"

int tr_map_file(const char *path, const char *what, const unsigned char **map, size_t *len, char *err,
                size_t errlen) {
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ft_errorf(err, errlen, "cannot open %s%s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return ft_errorf(err, errlen, "%s%s is not a regular file", what, path);
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ft_errorf(err, errlen, "cannot map %s%s: %s", what, path, strerror(e));
        }
        *map = m;
        *len = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

void tr_unmap_file(const unsigned char *map, size_t len) {
    if (map) munmap((void *)map, len);
}
