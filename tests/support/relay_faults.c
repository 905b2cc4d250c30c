/*
 * relay_faults.c: what a test can tell the fault relay to do (relay.h): the canned
 * replies, the rules that pick the commands and replies a fault hits, and the setters.
 *
 * A setter changes the settings under the relay's mutex, wakes the relay's thread and
 * waits until the thread has gone once around its loop with the new settings
 * (fr__commit), so that when a setter returns, the fault is in force.
 */
#include "relay_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---- canned replies ------------------------------------------------------------ */

enum { CAN_POISON = 1, CAN_STREAM = 2, CAN_CLOSE = 4 };

/* Each reply's name is its enumerator's; an error reply is "-NAME message\r\n". */
#define CANNED(id, bytes, flags) [FR_##id] = {#id, bytes, flags}
#define ERROR_REPLY(id, message) CANNED(id, "-" #id " " message "\r\n", 0)

static const struct canned {
    const char *name;
    const char *bytes;
    int flags; /* CAN_POISON: the stream is garbage after it (later replies are dropped);
                  CAN_STREAM: 10^9 filler bytes follow; CAN_CLOSE: the relay closes after */
} canned_table[FR_CANNED_COUNT] = {
    ERROR_REPLY(LOADING, "Redis is loading the dataset in memory"),
    ERROR_REPLY(
        BUSY, "Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
    ERROR_REPLY(MASTERDOWN,
                "Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    ERROR_REPLY(TRYAGAIN, "Multiple keys request during rehashing of slot"),
    ERROR_REPLY(CLUSTERDOWN, "The cluster is down"),
    ERROR_REPLY(READONLY, "You can't write against a read only replica."),
    ERROR_REPLY(OOM, "command not allowed when used memory > 'maxmemory'."),
    ERROR_REPLY(
        MISCONF,
        "Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."),
    ERROR_REPLY(NOSCRIPT, "No matching script. Please use EVAL."),
    ERROR_REPLY(NOAUTH, "Authentication required."),
    ERROR_REPLY(WRONGPASS, "invalid username-password pair or user is disabled."),
    ERROR_REPLY(NOPERM, "this user has no permissions to run the 'evalsha' command"),
    ERROR_REPLY(WRONGTYPE, "Operation against a key holding the wrong kind of value"),
    ERROR_REPLY(MOVED, "3999 127.0.0.1:6381"),
    ERROR_REPLY(ASK, "3999 127.0.0.1:6381"),
    ERROR_REPLY(CROSSSLOT, "Keys in request don't hash to the same slot"),
    ERROR_REPLY(ERR, "unknown command 'EVALSHA'"),
    CANNED(INTEGER, ":42\r\n", 0),
    CANNED(BULK, "$5\r\nhello\r\n", 0),
    CANNED(NIL, "$-1\r\n", 0),
    CANNED(STATUS, "+OK\r\n", 0),
    CANNED(EMPTY_ARRAY, "*0\r\n", 0),
    CANNED(HUGE_ARRAY, "*2147483647\r\n", CAN_POISON),
    CANNED(HUGE_BULK, "$1000000000\r\n", CAN_POISON | CAN_STREAM),
    CANNED(HTTP,
           "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: "
           "11\r\nConnection: close\r\n\r\nBad Request",
           CAN_POISON | CAN_CLOSE),
    CANNED(HUGE_INTEGER, ":9007199254740991\r\n", 0),
};

#undef CANNED
#undef ERROR_REPLY

const char *fr_canned_name(fr_canned c)
{
    return c >= 0 && c < FR_CANNED_COUNT ? canned_table[c].name : "?";
}

const char *fr_canned_bytes(fr_canned c, size_t *len)
{
    const char *b = c >= 0 && c < FR_CANNED_COUNT ? canned_table[c].bytes : "";
    *len = strlen(b);
    return b;
}

/* ---- rules ------------------------------------------------------------------------- */

static bool name_matches(const char *pattern, const char *name)
{
    if (pattern[0] == '\0')
        return true;
    if (name == NULL)
        return false;
    size_t n = strlen(pattern);
    if (pattern[n - 1] == '*')
        return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

const rule *fr__match(fr_relay *r, const char *name, unsigned actions)
{
    for (int i = 0; i < r->nrules; i++) {
        rule *ru = &r->rules[i];
        if (!(actions & (1u << ru->r.action)) || ru->r.count == 0 || !name_matches(ru->cmd, name))
            continue;
        if (ru->r.count > 0)
            ru->r.count--;
        return ru;
    }
    return NULL;
}

void fr__emit_canned(fr_relay *r, pair *p, fr_canned what)
{
    const struct canned *c = &canned_table[what];
    r->st.injected++;
    fr__emit(r, p, c->bytes, strlen(c->bytes), (c->flags & CAN_STREAM) ? 1000000000u : 0,
             (c->flags & CAN_CLOSE) ? CLOSE_FIN : CLOSE_NO);
    if (c->flags & CAN_POISON)
        p->poisoned = true;
}

/* ---- the setters ----------------------------------------------------------------- */

void fr_pass(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->delay_ns[0] = r->delay_ns[1] = 0;
    r->hold = 0;
    if (r->blackhole)
        r->healing = true;
    r->blackhole = false;
    r->trickle_ns = 0;
    r->refuse = false;
    r->nrules = 0;
    fr__commit(r);
}

void fr_delay(fr_relay *r, int64_t up_ms, int64_t down_ms)
{
    pthread_mutex_lock(&r->mu);
    r->delay_ns[0] = up_ms * 1000000;
    r->delay_ns[1] = down_ms * 1000000;
    fr__commit(r);
}

void fr_hold(fr_relay *r, int dirs)
{
    pthread_mutex_lock(&r->mu);
    r->hold = dirs & (FR_UP | FR_DOWN);
    fr__commit(r);
}

void fr_release(fr_relay *r)
{
    fr_hold(r, 0);
}

void fr_blackhole(fr_relay *r, bool on, enum fr_heal heal)
{
    pthread_mutex_lock(&r->mu);
    if (r->blackhole && !on)
        r->healing = true;
    r->blackhole = on;
    r->heal = heal;
    fr__commit(r);
}

void fr_trickle(fr_relay *r, int64_t ms_per_byte)
{
    pthread_mutex_lock(&r->mu);
    r->trickle_ns = ms_per_byte * 1000000;
    fr__commit(r);
}

void fr_refuse(fr_relay *r, bool on)
{
    pthread_mutex_lock(&r->mu);
    r->refuse = on;
    fr__commit(r);
}

void fr_reset_now(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->reset_all = true;
    fr__commit(r);
}

void fr_add_rule(fr_relay *r, const fr_rule *ru)
{
    pthread_mutex_lock(&r->mu);
    /* Spent rules give their places up; the live ones keep their order. */
    int live = 0;
    for (int i = 0; i < r->nrules; i++)
        if (r->rules[i].r.count != 0)
            r->rules[live++] = r->rules[i];
    r->nrules = live;
    if (r->nrules < MAX_RULES) {
        rule *d = &r->rules[r->nrules++];
        d->r = *ru;
        d->r.cmd = NULL;
        size_t i = 0;
        for (const char *s = ru->cmd ? ru->cmd : ""; *s && i < NAME_LEN - 1; s++)
            d->cmd[i++] = (char)toupper((unsigned char)*s);
        d->cmd[i] = '\0';
    } else {
        fprintf(stderr, "relay: more than %d rules; rule ignored\n", MAX_RULES);
    }
    fr__commit(r);
}

void fr_replace(fr_relay *r, fr_canned what, enum fr_action how, int count, const char *cmd)
{
    fr_rule ru = {.action = how, .canned = what, .count = count, .cmd = cmd};
    fr_add_rule(r, &ru);
}

void fr_clear_rules(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->nrules = 0;
    fr__commit(r);
}
