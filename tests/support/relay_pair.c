/*
 * relay_pair.c: one connection of the fault relay (relay_internal.h): a "pair" of the
 * client's socket and the one the relay opened to the server, with a queue of bytes
 * per direction and a parser per direction.
 *
 * Bytes read from either side are cut into whole messages by a redisReader (commands
 * from the client, replies from the server) before anything is decided about them, so
 * that a fault can hit one command or one reply exactly. Each pair keeps the list of
 * commands whose replies are still owed, in order ("expect"): a forwarded command
 * waits for the server's reply; a command the relay answers itself (a canned reply
 * "instead") is answered when it reaches the head of that list, so that replies stay
 * in the order the client sent its commands. Whole messages then go into the queue of
 * their direction, each chunk with the time it is due (read time + delay); the relay's
 * thread (relay.c) sends them.
 */
#include "relay_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- queues ----------------------------------------------------------------------- */

static bool q_push(queue *q, const char *data, size_t len, int64_t due, uint64_t filler,
                   int close_after)
{
    chunk *c = malloc(sizeof *c + len);
    if (c == NULL)
        return false;
    c->next = NULL;
    c->due_ns = due;
    c->len = len;
    c->off = 0;
    c->filler = filler;
    c->close_after = close_after != 0;
    c->rst = close_after == CLOSE_RST;
    if (len > 0)
        memcpy(c->data, data, len);
    FIFO_PUSH(q->head, q->tail, c);
    return true;
}

static void q_clear(queue *q)
{
    while (q->head != NULL) {
        chunk *c = q->head;
        q->head = c->next;
        free(c);
    }
    q->tail = NULL;
}

/* ---- pairs ------------------------------------------------------------------------- */

void fr__close_fd(int *fd, bool rst)
{
    if (*fd < 0)
        return;
    if (rst) {
        /* SO_LINGER with a zero timeout: close() sends RST instead of FIN. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(*fd);
    *fd = -1;
}

void fr__pair_close(fr_relay *r, pair *p, bool rst)
{
    if (p->closing)
        return;
    if (rst && p->fd[0] >= 0)
        r->st.resets++;
    fr__close_fd(&p->fd[0], rst);
    fr__close_fd(&p->fd[1], false);
    p->closing = true;
}

void fr__pair_free(pair *p)
{
    for (int i = 0; i < 2; i++) {
        q_clear(&p->q[i]);
        if (p->ps[i].rd != NULL)
            redisReaderFree(p->ps[i].rd);
        free(p->ps[i].raw);
    }
    while (p->exp != NULL) {
        expect *e = p->exp;
        p->exp = e->next;
        free(e);
    }
    free(p);
}

/* ---- commands and replies: what becomes of each ---------------------------------- */

void fr__emit(fr_relay *r, pair *p, const char *data, size_t len, uint64_t filler, int close_after)
{
    if (!q_push(&p->q[1], data, len, fr__now_ns() + r->delay_ns[1], filler, close_after))
        fr__pair_close(r, p, true);
}

/* Answer the commands at the head of the expect list that the relay answers itself. */
static void drain_canned(fr_relay *r, pair *p)
{
    while (p->exp != NULL && p->exp->canned && !p->closing) {
        expect *e = p->exp;
        FIFO_SHIFT(p->exp, p->exp_tail);
        if (!p->poisoned)
            fr__emit_canned(r, p, e->what);
        free(e);
    }
}

static bool push_expect(pair *p, bool canned, fr_canned what, const char *name)
{
    expect *e = calloc(1, sizeof *e);
    if (e == NULL)
        return false;
    e->canned = canned;
    e->what = what;
    snprintf(e->name, sizeof e->name, "%s", name);
    FIFO_PUSH(p->exp, p->exp_tail, e);
    return true;
}

/* A whole command from the client, raw[0..len). */
static void on_command(fr_relay *r, pair *p, const redisReply *m, const char *raw, size_t len)
{
    char name[NAME_LEN] = "";
    if (m->type == REDIS_REPLY_ARRAY && m->elements > 0 &&
        m->element[0]->type == REDIS_REPLY_STRING) {
        size_t n = m->element[0]->len < NAME_LEN - 1 ? m->element[0]->len : NAME_LEN - 1;
        for (size_t i = 0; i < n; i++)
            name[i] = (char)toupper((unsigned char)m->element[0]->str[i]);
        name[n] = '\0';
    }
    r->st.commands++;
    if (p->subscribed) {
        if (!q_push(&p->q[0], raw, len, fr__now_ns() + r->delay_ns[0], 0, CLOSE_NO))
            fr__pair_close(r, p, true);
        return;
    }
    const rule *ru = fr__match(r, name, (1u << FR_RESET_REQUEST) | (1u << FR_REPLACE_INSTEAD));
    if (ru != NULL && ru->r.action == FR_RESET_REQUEST) {
        fr__pair_close(r, p, true);
        return;
    }
    bool ok;
    if (ru != NULL) {
        ok = push_expect(p, true, ru->r.canned, name);
    } else {
        ok = q_push(&p->q[0], raw, len, fr__now_ns() + r->delay_ns[0], 0, CLOSE_NO) &&
             push_expect(p, false, FR_CANNED_COUNT, name);
    }
    if (!ok) {
        fr__pair_close(r, p, true);
        return;
    }
    if (strcmp(name, "SUBSCRIBE") == 0 || strcmp(name, "PSUBSCRIBE") == 0 ||
        strcmp(name, "SSUBSCRIBE") == 0)
        p->subscribed = true;
    drain_canned(r, p);
}

/* A whole reply from the server, raw[0..len). */
static void on_reply(fr_relay *r, pair *p, const char *raw, size_t len)
{
    r->st.replies++;
    if (p->poisoned)
        return;
    expect *e = NULL;
    if (p->exp != NULL && !p->exp->canned) {
        e = p->exp;
        FIFO_SHIFT(p->exp, p->exp_tail);
    }
    const rule *ru =
        fr__match(r, e != NULL ? e->name : NULL,
                  (1u << FR_RESET_REPLY) | (1u << FR_REPLACE_AFTER) | (1u << FR_CLOSE_AFTER));
    free(e);
    size_t k = ru == NULL || ru->r.k < 0 ? 0 : (size_t)ru->r.k;
    if (k > len)
        k = len;
    if (ru == NULL) {
        fr__emit(r, p, raw, len, 0, CLOSE_NO);
    } else if (ru->r.action == FR_RESET_REPLY && k == 0) {
        fr__pair_close(r, p, true);
        return;
    } else if (ru->r.action == FR_RESET_REPLY) {
        fr__emit(r, p, raw, k, 0, CLOSE_RST);
    } else if (ru->r.action == FR_REPLACE_AFTER) {
        fr__emit_canned(r, p, ru->r.canned);
    } else {
        fr__emit(r, p, raw, k, 0, CLOSE_FIN);
    }
    drain_canned(r, p);
}

/* ---- parsing: whole messages out of each direction's bytes ----------------------- */

static bool ps_append(parser *ps, const char *b, size_t n)
{
    if (ps->len + n > ps->cap) {
        size_t cap = ps->cap ? ps->cap : 4096;
        while (cap < ps->len + n)
            cap *= 2;
        char *nr = realloc(ps->raw, cap);
        if (nr == NULL)
            return false;
        ps->raw = nr;
        ps->cap = cap;
    }
    memcpy(ps->raw + ps->len, b, n);
    ps->len += n;
    return true;
}

/* Bytes that pass without being understood: forward them as they are. */
static void pass_raw(fr_relay *r, pair *p, int side, const char *b, size_t n)
{
    if (n == 0)
        return;
    if (side == 0) {
        if (!q_push(&p->q[0], b, n, fr__now_ns() + r->delay_ns[0], 0, CLOSE_NO))
            fr__pair_close(r, p, true);
    } else if (!p->poisoned) {
        fr__emit(r, p, b, n, 0, CLOSE_NO);
    }
}

void fr__ingest(fr_relay *r, pair *p, int side, const char *b, size_t n)
{
    parser *ps = &p->ps[side];
    if (ps->off) {
        pass_raw(r, p, side, b, n);
        return;
    }
    if (redisReaderFeed(ps->rd, b, n) != REDIS_OK || !ps_append(ps, b, n)) {
        fr__pair_close(r, p, true);
        return;
    }
    while (!p->closing) {
        void *obj = NULL;
        if (redisReaderGetReply(ps->rd, &obj) != REDIS_OK) {
            /* Not RESP (an inline command, say): stop parsing this side and let the
             * rest through untouched. */
            ps->off = true;
            pass_raw(r, p, side, ps->raw, ps->len);
            ps->len = 0;
            return;
        }
        if (obj == NULL)
            return;
        size_t unread = ps->rd->len - ps->rd->pos;
        size_t mlen = ps->len - unread;
        if (side == 0)
            on_command(r, p, obj, ps->raw, mlen);
        else
            on_reply(r, p, ps->raw, mlen);
        freeReplyObject(obj);
        memmove(ps->raw, ps->raw + mlen, unread);
        ps->len = unread;
    }
}
