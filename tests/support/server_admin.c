/*
 * server_admin.c: admin connections to a test's redis-server (support.h): connected
 * and authenticated as the server's own arguments say, with short timeouts, and the
 * checks of their replies that tests and fixtures share.
 */
#include "support.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD_TIMEOUT_MS 2000 /* dh_cmd's connect and command timeout */

const char *dh_server_password(const dh_server *s)
{
    for (int i = 0; i + 1 < DH_EXTRA_MAX && s->extra[i]; i++)
        if (strcmp(s->extra[i], "--requirepass") == 0)
            return s->extra[i + 1];
    return NULL;
}

long dh_info_long(const redisReply *r, const char *field)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return -1;
    size_t flen = strlen(field);
    for (const char *p = r->str; (p = strstr(p, field)) != NULL; p += flen) {
        if ((p == r->str || p[-1] == '\n') && p[flen] == ':')
            return strtol(p + flen + 1, NULL, 10);
    }
    return -1;
}

redisContext *dh_connect(dh_server *s)
{
    struct timeval tv = {.tv_sec = CMD_TIMEOUT_MS / 1000, .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout(s->host, s->port, tv);
    if (!c || c->err) {
        fprintf(stderr, "dh: connect to %s:%d: %s\n", s->host, s->port,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    const char *pw = dh_server_password(s);
    if (pw) {
        redisReply *r = redisCommand(c, "AUTH %s", pw);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (!ok)
            fprintf(stderr, "dh: AUTH on %s:%d failed: %s\n", s->host, s->port,
                    r ? (r->str ? r->str : "?") : c->errstr);
        freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

redisReply *dh_cmd(dh_server *s, const char *fmt, ...)
{
    redisContext *c = dh_connect(s);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fprintf(stderr, "dh: command on %s:%d failed: %s\n", s->host, s->port, c->errstr);
    redisFree(c);
    return r;
}

int dh_reply_integer(redisReply *r, const char *what, long long *out)
{
    bool ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (ok)
        *out = r->integer;
    else if (r != NULL)
        fprintf(stderr, "dh: %s: %s\n", what,
                r->type == REDIS_REPLY_ERROR ? r->str : "not an integer reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

int dh_reply_status(redisReply *r, const char *what)
{
    bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (r != NULL && !ok)
        fprintf(stderr, "dh: %s: %s\n", what,
                r->type == REDIS_REPLY_ERROR ? r->str : "not a status reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}
