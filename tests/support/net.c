/*
 * net.c: sockets: writing a whole buffer, which send(2) may take in parts.
 *
 * No dependency beyond libc, so that the fuzzers compile it in without the rest of
 * the library.
 */
#include "support.h"

#include <errno.h>
#include <sys/socket.h>

int dh_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}
