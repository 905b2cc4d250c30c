/*
 * fuzz_server.c: the listening unix socket the connection fuzzers serve from.
 */
#include "fuzz_server.h"
#include "support.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int g_listen = -1;
static char g_path[108];
static char g_dir[64];

/* Remove the socket and its directory when the fuzzer exits. */
static void cleanup(void)
{
    if (g_path[0])
        unlink(g_path);
    if (g_dir[0])
        rmdir(g_dir);
}

_Noreturn static void die(const char *what)
{
    fprintf(stderr, "fuzz_server: %s: %s\n", what, strerror(errno));
    exit(2);
}

void fs_init(void)
{
    if (g_listen >= 0)
        return;
    snprintf(g_dir, sizeof g_dir, "/tmp/dlock-fuzz-XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        die("mkdtemp");
    snprintf(g_path, sizeof g_path, "%s/s", g_dir);
    atexit(cleanup);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    memcpy(sun.sun_path, g_path, strlen(g_path) + 1);
    g_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g_listen < 0)
        die("socket");
    if (bind(g_listen, (struct sockaddr *)&sun, sizeof sun) < 0)
        die("bind");
    /* A round opens at most one connection per node; the backlog only needs a few. */
    if (listen(g_listen, 64) < 0)
        die("listen");
}

const char *fs_url(const char *prefix, const char *suffix)
{
    static char url[256];
    snprintf(url, sizeof url, "unix://%s%s%s", prefix, g_path, suffix);
    return url;
}

int fs_accept(void)
{
    int fd = accept4(g_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        die("accept");
    return fd;
}

bool fs_write(int fd, const void *buf, size_t len)
{
    if (dh_send_all(fd, buf, len) == 0)
        return true;
    if (errno == EPIPE || errno == ECONNRESET)
        return false; /* the library closed this connection already */
    die("send to the client (more than its socket buffer?)");
}

void fs_drain(int fd)
{
    char buf[4096];
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
}
