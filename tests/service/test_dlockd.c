/*
 * test_dlockd.c: dlockd as a Redis-protocol server: what common clients send on
 * connect, AUTH, and bad input (garbage, absurd sizes, 10,000 arguments, a pipeline of
 * 100,000 commands, a client that never reads, too many clients). A real dlockd
 * process in front of a real redis-server; hiredis and raw sockets as clients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* dlockd is still there and answering. */
static void expect_serving(void)
{
    redisContext *c = dt_connect(&dt_one);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
}

static void test_compat(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&dt_one);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    dt_expect_status(dt_cmd(c, "ping"), "PONG");
    redisReply *r = dt_cmd(c, "PING %s", "hello");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "hello");
    freeReplyObject(r);
    r = dt_cmd(c, "ECHO %b", "a\0b\r\n", (size_t)5);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 5);
    assert_memory_equal(r->str, "a\0b\r\n", 5);
    freeReplyObject(r);

    r = dt_cmd(c, "INFO");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_non_null(strstr(r->str, "\r\nloading:0\r\n"));
    assert_non_null(strstr(r->str, "# Locks\r\n"));
    assert_non_null(strstr(r->str, "dlockd_version:"));
    freeReplyObject(r);
    /* This connection alone, once dlockd has seen the earlier ones (dt_start's probe,
     * the previous test's) close: a close reaches it as an EOF, some time later. */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(c, "connected_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    r = dt_cmd(c, "INFO persistence");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_non_null(strstr(r->str, "loading:0"));
    assert_null(strstr(r->str, "# Server"));
    freeReplyObject(r);

    dt_expect_status(dt_cmd(c, "SELECT 0"), "OK");
    dt_expect_error(dt_cmd(c, "SELECT 1"), "ERR");
    dt_expect_status(dt_cmd(c, "CLIENT SETNAME worker-1"), "OK");
    r = dt_cmd(c, "CLIENT GETNAME");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "worker-1");
    freeReplyObject(r);
    dt_expect_error(dt_cmd(c, "CLIENT SETNAME %s", "two words"), "ERR");
    dt_expect_status(dt_cmd(c, "CLIENT SETINFO lib-name hiredis"), "OK");
    r = dt_cmd(c, "CLIENT ID");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_true(r->integer >= 1);
    freeReplyObject(r);

    r = dt_cmd(c, "HELLO 2");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 14);
    assert_string_equal(r->element[0]->str, "server");
    assert_string_equal(r->element[1]->str, "dlockd");
    assert_string_equal(r->element[4]->str, "proto");
    assert_int_equal(r->element[5]->integer, 2);
    freeReplyObject(r);
    dt_expect_error(dt_cmd(c, "HELLO 3"), "NOPROTO");

    r = dt_cmd(c, "COMMAND");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = dt_cmd(c, "COMMAND DOCS");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 0);
    freeReplyObject(r);

    r = dt_cmd(c, "FLUSHALL now");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR unknown command 'FLUSHALL', with args beginning with: 'now' ");
    freeReplyObject(r);
    dt_expect_error(dt_cmd(c, "UNLOCK onlyname"), "ERR wrong number of arguments");
    dt_expect_status(dt_cmd(c, "QUIT"), "OK");
    /* QUIT closes the connection once its +OK is written. */
    void *none = NULL;
    assert_int_equal(redisGetReply(c, &none), REDIS_ERR);
    redisFree(c);

    /* Inline commands, as from telnet. */
    const char inl[] = "PING\r\n  ECHO   two\nQUIT\r\n";
    char buf[256];
    bool closed = dt_raw_exchange(&dt_one, inl, sizeof inl - 1, buf, sizeof buf, 2000 * dh_slack());
    assert_string_equal(buf, "+PONG\r\n$3\r\ntwo\r\n+OK\r\n");
    assert_true(closed);
}

/* A bad request gets "-ERR Protocol error: ..." and the connection is closed; the
 * daemon serves the others as before. */
static void expect_protocol_error(const void *req, size_t n, const char *what)
{
    char buf[512];
    int64_t t0 = dh_now_ms();
    bool closed = dt_raw_exchange(&dt_one, req, n, buf, sizeof buf, 5000 * dh_slack());
    if (strncmp(buf, "-ERR Protocol error: ", 21) != 0 || !closed)
        fail_msg("%s: got '%s' (closed %d)", what, buf, closed);
    buf[strcspn(buf, "\r\n")] = '\0';
    print_message("FIG dlockd_protocol_error_close_ms %lld ms (%s: %s)\n",
                  (long long)(dh_now_ms() - t0), what, buf);
    expect_serving();
}

static void test_bad_input(void **state)
{
    (void)state;
    static const char garbage[] = "*2\r\n$4\r\nPING\r\nxyz\r\n";
    expect_protocol_error(garbage, sizeof garbage - 1, "garbage where '$' belongs");
    static const char badcount[] = "*1x\r\n";
    expect_protocol_error(badcount, sizeof badcount - 1, "a count that is no number");
    /* Refused at the header: nothing of the announced size is allocated or awaited. */
    static const char huge_count[] = "*2147483647\r\n";
    expect_protocol_error(huge_count, sizeof huge_count - 1, "*2147483647");
    static const char huge_bulk[] = "*2\r\n$4\r\nECHO\r\n$1073741824\r\n";
    expect_protocol_error(huge_bulk, sizeof huge_bulk - 1, "a 1 GB bulk");
    static const char no_crlf[] = "*1\r\n$4\r\nPINGxx";
    expect_protocol_error(no_crlf, sizeof no_crlf - 1, "a bulk without its CRLF");

    /* 10,000 arguments, sent in full. */
    {
        size_t cap = 10000 * 16 + 64, n = 0;
        char *req = malloc(cap);
        assert_non_null(req);
        n += (size_t)snprintf(req + n, cap - n, "*10000\r\n$4\r\nECHO\r\n");
        for (int i = 1; i < 10000; i++)
            n += (size_t)snprintf(req + n, cap - n, "$1\r\nx\r\n");
        expect_protocol_error(req, n, "10,000 arguments");
        free(req);
    }

    /* An inline line that never ends. */
    size_t big = 70000;
    char *line = malloc(big);
    assert_non_null(line);
    memset(line, 'a', big);
    expect_protocol_error(line, big, "an endless inline line");
    free(line);

    /* An incomplete command past the query buffer limit: 1,024 arguments of 2 KB with
     * the last one missing. */
    size_t cap = 1024 * 2100 + 64, n = 0;
    char *req = malloc(cap);
    assert_non_null(req);
    n += (size_t)snprintf(req + n, cap - n, "*1024\r\n");
    char arg[2048];
    memset(arg, 'b', sizeof arg);
    for (int i = 0; i < 1023; i++) {
        n += (size_t)snprintf(req + n, cap - n, "$2048\r\n");
        memcpy(req + n, arg, sizeof arg);
        n += sizeof arg;
        memcpy(req + n, "\r\n", 2);
        n += 2;
    }
    expect_protocol_error(req, n, "a command over the query buffer limit");
    free(req);
}

/* 100,000 ECHOs in one pipeline: every reply, in order, while the client writes and
 * reads at once as a pipelining client does. */
static void test_pipeline(void **state)
{
    (void)state;
    enum { N = 100000 };
    size_t len;
    char *req = dt_numbered_pipeline("ECHO", N, &len);
    int fd = dt_raw(&dt_one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    redisReader *rd = redisReaderCreate();
    assert_non_null(rd);
    size_t sent = 0;
    int got = 0;
    int64_t t0 = dh_now_ms(), deadline = t0 + 60000 * dh_slack();
    while (got < N) {
        assert_true(dh_now_ms() < deadline);
        struct pollfd p = {.fd = fd, .events = POLLIN | (sent < len ? POLLOUT : 0)};
        assert_true(poll(&p, 1, 1000) >= 0);
        if ((p.revents & POLLOUT) && sent < len) {
            ssize_t w = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[65536];
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            assert_true(n > 0);
            assert_int_equal(redisReaderFeed(rd, buf, (size_t)n), REDIS_OK);
            void *r;
            while (redisReaderGetReply(rd, &r) == REDIS_OK && r != NULL) {
                redisReply *rep = r;
                char want[16];
                snprintf(want, sizeof want, "%d", got);
                if (rep->type != REDIS_REPLY_STRING || strcmp(rep->str, want) != 0)
                    fail_msg("reply %d: type %d '%s'", got, rep->type, rep->str ? rep->str : "");
                freeReplyObject(rep);
                got++;
            }
        }
    }
    print_message("FIG dlockd_pipeline_100k_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    redisReaderFree(rd);
    close(fd);
    free(req);
    expect_serving();
}

/* A client that sends without ever reading: dlockd stops reading from it once its
 * unread replies pass the limit, so its memory stays bounded however long it goes on. */
static void test_client_never_reads(void **state)
{
    (void)state;
    long long rss0 = dt_rss_kib(dt_one.pid);
    assert_true(rss0 > 0);
    int fd = dt_raw(&dt_one);
    int small = 64 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    static char chunk[65536];
    size_t chunk_len = dt_fill_echoes(chunk, sizeof chunk);
    size_t sent = 0, off = 0;
    int64_t quiet_since = dh_now_ms();
    /* Write until dlockd has taken nothing for a second (it stopped reading), or 200 MB. */
    while (sent < (size_t)200 << 20 && dh_now_ms() - quiet_since < 1000) {
        ssize_t w = send(fd, chunk + off, chunk_len - off, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            off = (off + (size_t)w) % chunk_len;
            quiet_since = dh_now_ms();
        } else {
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
            dh_sleep_ms(10);
        }
    }
    dt_expect_unread_bounded(&dt_one, "dlockd", sent, rss0);
    expect_serving();
    close(fd);
    expect_serving();
}

/* Until a new connection to port is served a PING, within 5 s times the slack (a
 * place freed by a client that left, descriptors given back). */
static void wait_until_served(int port)
{
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    for (;;) {
        redisContext *c = redisConnect("127.0.0.1", port);
        redisReply *r = c != NULL && c->err == 0 ? redisCommand(c, "PING") : NULL;
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        redisFree(c);
        if (ok)
            return;
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(20);
    }
}

static void test_maxclients(void **state)
{
    (void)state;
    dt_daemon small;
    dt_start(&small, it_srv.url, "--maxclients", "2", NULL);
    redisContext *a = dt_connect(&small);
    /* dt_start's probe connection may not have been seen closing yet. */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(a, "connected_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    redisContext *b = dt_connect(&small);
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    dt_expect_status(dt_cmd(b, "PING"), "PONG");
    int fd = dt_raw(&small);
    char buf[256];
    bool closed;
    dt_raw_read_all(fd, buf, sizeof buf, 5000 * dh_slack(), &closed);
    assert_string_equal(buf, "-ERR max number of clients reached\r\n");
    assert_true(closed);
    close(fd);
    redisFree(b);
    /* A place is free again once a client leaves. */
    wait_until_served(small.port);
    redisFree(a);
    assert_int_equal(dt_stop(&small), 0);
}

/* A hard open-files limit of 256: dlockd lowers maxclients to what it allows, so that
 * connections past it are refused with -ERR max number of clients reached, none is
 * half served, the lock servers' connections keep their descriptors, and dlockd serves
 * again as soon as clients leave. */
static void test_fd_limit(void **state)
{
    (void)state;
    dt_daemon f;
    /* 144 descriptors are kept (the lock servers, refused clients), 2 a client:
     * maxclients 56. */
    dt_next_nofile(256);
    dt_start(&f, it_srv.url, NULL);
    redisContext *a = dt_connect(&f);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK fd-limit"), &l);
    enum { N = 150 };
    int fds[N], n = 0;
    for (int i = 0; i < N; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)f.port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            fds[n++] = fd;
        else
            close(fd);
    }
    dh_sleep_ms(200);
    /* The connection opened before is served all along. */
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    for (int i = 0; i < n; i++)
        close(fds[i]);
    wait_until_served(f.port);
    dt_expect_int(dt_cmd(a, "UNLOCK fd-limit %s", l.token), 1);
    redisFree(a);
    assert_int_equal(dt_stop(&f), 0);
}

/* Refusals that come at once: a stopped dlockd finds 300 connections waiting past its
 * maxclients and accepts them all in one turn of its loop, more than its open-files
 * limit of 256 could hold at once. Each is refused, none closed unanswered for want of
 * a descriptor (libuv's way at the limit, which it does not report). */
static void test_refusal_burst(void **state)
{
    (void)state;
    dt_daemon f;
    dt_next_nofile(256);
    dt_start(&f, it_srv.url, "--maxclients", "2", NULL); /* dt_start's probe may count */
    redisContext *a = dt_connect(&f);
    dt_wait_info(a, "connected_clients", 1, 5000 * dh_slack());
    int full = dt_raw(&f);
    dt_wait_info(a, "connected_clients", 2, 5000 * dh_slack());
    enum { N = 300 };
    int fds[N];
    assert_int_equal(kill(f.pid, SIGSTOP), 0);
    for (int i = 0; i < N; i++)
        fds[i] = dt_raw(&f); /* the kernel completes the handshakes meanwhile */
    assert_int_equal(kill(f.pid, SIGCONT), 0);
    dt_wait_info(a, "rejected_connections", N, 10000 * dh_slack());
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    for (int i = 0; i < N; i++)
        close(fds[i]);
    close(full);
    redisFree(a);
    assert_int_equal(dt_stop(&f), 0);
}

static void test_unixsocket(void **state)
{
    (void)state;
    char path[256];
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(path, sizeof path, "%s/dlockd-%dt_one.sock", tmp != NULL ? tmp : "/tmp",
             (int)getpid());
    dt_daemon u;
    dt_start(&u, it_srv.url, "--unixsocket", path, "--unixsocketperm", "770", NULL);
    /* The mode asked for, not the umask's (the unit makes the socket 777 this way). */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0770);
    redisContext *c = redisConnectUnix(path);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    dt_lock l;
    dt_expect_lock(dt_cmd(c, "LOCK unix-name"), &l);
    dt_expect_int(dt_cmd(c, "UNLOCK unix-name %s", l.token), 1);
    redisFree(c);
    assert_int_equal(dt_stop(&u), 0);
    assert_int_equal(access(path, F_OK), -1); /* removed at exit */
}

static void test_auth(void **state)
{
    (void)state;
    char path[256];
    dt_write_pass(path, sizeof path, "auth", "s3cret pass");
    dt_daemon a;
    dt_start(&a, it_srv.url, "--requirepass-file", path, NULL);
    unlink(path);
    redisContext *c = dt_connect(&a);
    dt_expect_error(dt_cmd(c, "PING"), "NOAUTH Authentication required.");
    dt_expect_error(dt_cmd(c, "LOCK x"), "NOAUTH");
    dt_expect_error(dt_cmd(c, "NOSUCHCOMMAND"), "NOAUTH");
    dt_expect_error(dt_cmd(c, "AUTH %s", "wrong"),
                    "WRONGPASS invalid username-password pair or user is disabled.");
    dt_expect_error(dt_cmd(c, "AUTH alice %s", "s3cret pass"), "WRONGPASS");
    dt_expect_error(dt_cmd(c, "PING"), "NOAUTH");
    dt_expect_status(dt_cmd(c, "AUTH %s", "s3cret pass"), "OK");
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    /* INFO counts the errors by kind: four NOAUTH, two WRONGPASS (an ERR kind). */
    assert_int_equal(dt_info(c, "errors_noauth"), 4);
    assert_int_equal(dt_info(c, "errors_err"), 2);
    redisFree(c);
    c = dt_connect(&a);
    dt_expect_status(dt_cmd(c, "AUTH default %s", "s3cret pass"), "OK");
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
    c = dt_connect(&a);
    redisReply *r = dt_cmd(c, "HELLO 2 AUTH default %s", "s3cret pass");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
    assert_int_equal(dt_stop(&a), 0);

    /* Never on the command line. */
    const char *argv[] = {getenv("DLOCKD"), "--requirepass", "x", NULL};
    char err[512];
    assert_int_equal(dh_run(argv, NULL, NULL, 0, err, sizeof err), 64);
    assert_non_null(strstr(err, "--requirepass-file"));
    /* Without a password set, AUTH is an error, not a silent success. */
    c = dt_connect(&dt_one);
    dt_expect_error(dt_cmd(c, "AUTH %s", "x"), "ERR");
    redisFree(c);
}

static void test_usage(void **state)
{
    (void)state;
    const char *bad[][5] = {{"--port", "70000", NULL},
                            {"--maxclients", "0", NULL},
                            {"--nosuch", NULL},
                            {"--unixsocket", "/tmp/x.sock", "--unixsocketperm", "778"},
                            {"--unixsocketperm", "770", NULL},
                            {"-s", "http://x", NULL},
                            {"extra", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[6] = {getenv("DLOCKD")};
        for (int k = 0; bad[i][k] != NULL; k++)
            argv[k + 1] = bad[i][k];
        char err[512];
        int st = dh_run(argv, NULL, NULL, 0, err, sizeof err);
        if (st != 64 || strncmp(err, "dlockd: ", 8) != 0)
            fail_msg("%s: exit %d, '%s'", bad[i][0], st, err);
    }
    const char *help[] = {getenv("DLOCKD"), "--help", NULL};
    char out[8192];
    assert_int_equal(dh_run(help, NULL, out, sizeof out, NULL, 0), 0);
    assert_non_null(strstr(out, "--requirepass-file"));
    /* Whole, or the last options would go unchecked. */
    assert_non_null(strstr(out, "Exit status:"));

    /* The man page has every option --help lists (roff escapes each '-') and every
     * command, and groff finds nothing wrong in it. */
    static char man[65536];
    FILE *f = fopen(DLOCK_SOURCE_DIR "/docs/dlockd.8", "r");
    assert_non_null(f);
    size_t n = fread(man, 1, sizeof man - 1, f);
    fclose(f);
    assert_true(n < sizeof man - 1); /* the whole page */
    man[n] = '\0';
    int options = 0;
    for (const char *p = strstr(out, "--"); p != NULL; p = strstr(p + 2, "--")) {
        char opt[64], roff[128];
        size_t len = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
        snprintf(opt, sizeof opt, "%.*s", (int)len, p + 2);
        snprintf(roff, sizeof roff, "\\-\\-");
        for (size_t i = 0; opt[i] != '\0'; i++)
            snprintf(roff + strlen(roff), sizeof roff - strlen(roff), opt[i] == '-' ? "\\-" : "%c",
                     opt[i]);
        if (strstr(man, roff) == NULL)
            fail_msg("docs/dlockd.8 lacks --%s", opt);
        options++;
    }
    assert_true(options >= 10);
    static const char *const commands[] = {
        ".B LOCK \\fIname",  ".B UNLOCK",        ".B EXTEND",       ".B CHECK",
        ".B LOCKINFO",       ".B SEM ACQUIRE",   ".B SEM RELEASE",  ".B STOCK SET",
        ".B STOCK ADD",      ".B STOCK RESERVE", ".B STOCK COMMIT", ".B STOCK CANCEL",
        ".B STOCK EXTEND",   ".B STOCK STATUS",  ".B ELECT",        ".B RESIGN",
        ".B PROCLAIM",       ".B LEADER",        ".B SUBSCRIBE",    "SIGTERM",
        "DLOCKD_REQUIREPASS"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strstr(man, commands[i]) == NULL)
            fail_msg("docs/dlockd.8 lacks \"%s\"", commands[i]);
    if (access("/usr/bin/groff", X_OK) == 0) {
        const char *lint[] = {
            "/usr/bin/groff", "-man", "-ww", "-z", DLOCK_SOURCE_DIR "/docs/dlockd.8", NULL};
        char err[2048];
        int st = dh_run(lint, NULL, NULL, 0, err, sizeof err);
        if (st != 0 || err[0] != '\0')
            fail_msg("groff on docs/dlockd.8: exit %d: %s", st, err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compat),        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_pipeline),      cmocka_unit_test(test_client_never_reads),
        cmocka_unit_test(test_maxclients),    cmocka_unit_test(test_fd_limit),
        cmocka_unit_test(test_refusal_burst), cmocka_unit_test(test_unixsocket),
        cmocka_unit_test(test_auth),          cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
