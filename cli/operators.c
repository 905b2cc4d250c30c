/*
 * operators.c: what an operator does to locks that are not theirs: `dlock list` shows
 * every held name and its holders, `dlock break NAME` frees a stuck lock whoever holds
 * it.
 *
 * A break is the operator's word against a holder that may still be running, so it
 * says exactly whom it evicted and the fence it raised (a resource that admits fences
 * refuses the evicted holder from that fence on), and it leaves a record on the
 * servers that `dlock status` shows to whoever comes to look at the name next.
 */
#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Of a token, what status shows: enough to tell holders apart, never enough to act as
 * the holder (a break that reached too few servers leaves the lock valid on the others). */
#define TOKEN_SHOWN 8

/* A break's record of whom it evicted, its tokens cut to TOKEN_SHOWN characters and
 * "...": a token is a word of DLOCK_TOKEN_LEN lowercase hex digits ("<n> shared:
 * <token> <description>; <token> ..." names one per shared holder). */
static void cut_tokens(const char *holder, char *out, size_t size)
{
    size_t o = 0;
    for (const char *p = holder; *p != '\0' && o + 1 < size;) {
        size_t hex = strspn(p, "0123456789abcdef");
        bool word = (p == holder || p[-1] == ' ') && (p[hex] == ' ' || p[hex] == '\0');
        size_t take = hex == DLOCK_TOKEN_LEN && word ? TOKEN_SHOWN : hex > 0 ? hex : 1;
        for (size_t i = 0; i < take && o + 1 < size; i++)
            out[o++] = p[i];
        if (take == TOKEN_SHOWN && hex == DLOCK_TOKEN_LEN)
            for (const char *d = "..."; *d != '\0' && o + 1 < size; d++)
                out[o++] = *d;
        p += hex > 0 ? hex : 1;
    }
    out[o] = '\0';
}

/* "<description> (token <token>)" of a break's holder, whose record is "<token>
 * <description>" (or "<n> shared: ..." for shared holders, written as it is); the
 * token whole (dlock break, to the operator who broke it), or its first TOKEN_SHOWN
 * characters (dlock status, to anyone). */
static void write_evicted(FILE *f, const char *holder, bool whole)
{
    size_t len = strlen(holder), tok = strspn(holder, "0123456789abcdef");
    if (tok == DLOCK_TOKEN_LEN && len > tok && holder[tok] == ' ') {
        cli_write_safe(f, holder + tok + 1, len - tok - 1);
        fprintf(f, " (token %.*s%s)", whole ? DLOCK_TOKEN_LEN : TOKEN_SHOWN, holder,
                whole ? "" : "...");
    } else if (whole) {
        cli_write_safe(f, holder, len);
    } else {
        char cut[sizeof((dlock_break_info *)0)->holder];
        cut_tokens(holder, cut, sizeof cut);
        cli_write_safe(f, cut, strcspn(cut, ";"));
        if (cut[strcspn(cut, ";")] != '\0')
            fputs("; ...", f);
    }
}

/* A break's time, as UTC ISO 8601 to the second. */
static const char *format_at(int64_t at_ms, char *buf, size_t len)
{
    time_t t = (time_t)(at_ms / 1000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "%" PRId64 " ms", at_ms);
    return buf;
}

void cli_print_break(const char *name, const dlock_break_info *b, bool json, const char *indent)
{
    /* dlock break (no indent) shows the evicted token whole; status only its start. */
    bool whole = indent[0] == '\0';
    if (json) {
        fputs("{\"name\":", stdout);
        cli_write_json_string(stdout, name, strlen(name));
        printf(",\"at_ms\":%" PRId64 ",\"fence\":%" PRIu64 ",\"holder\":", b->at_ms, b->fence);
        size_t tok = strspn(b->holder, "0123456789abcdef");
        if (!whole && tok == DLOCK_TOKEN_LEN && b->holder[tok] == ' ') {
            const char *desc = b->holder + tok + 1;
            cli_write_json_string(stdout, desc, strlen(desc));
            printf(",\"token\":\"%.*s...\"", TOKEN_SHOWN, b->holder);
        } else if (whole) {
            cli_write_json_string(stdout, b->holder, strlen(b->holder));
        } else {
            char cut[sizeof b->holder];
            cut_tokens(b->holder, cut, sizeof cut);
            cli_write_json_string(stdout, cut, strlen(cut));
        }
        fputs(",\"by\":", stdout);
        cli_write_json_string(stdout, b->by, strlen(b->by));
        fputs(",\"reason\":", stdout);
        cli_write_json_string(stdout, b->reason, strlen(b->reason));
        fputs("}", stdout);
        return;
    }
    char at[64];
    printf("%sbroken at %s by ", indent, format_at(b->at_ms, at, sizeof at));
    cli_write_safe(stdout, b->by, strlen(b->by));
    if (b->reason[0] != '\0') {
        fputs(" (", stdout);
        cli_write_safe(stdout, b->reason, strlen(b->reason));
        fputs(")", stdout);
    }
    fputs(", evicting ", stdout);
    write_evicted(stdout, b->holder, whole);
    printf("; fence raised to %" PRIu64 "\n", b->fence);
}

int cli_cmd_break(struct cli *cli, char **args, const struct cmd_opts *o)
{
    const char *name = args[0];
    char what[CLI_WHAT_LEN];
    int code = cli_begin(cli, name, what);
    if (code != 0)
        return code;
    dlock_break_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.reason = o->reason;
    opts.fence_key = o->fence_key;
    dlock_break_info b;
    int rc = dlock_break(cli->client, name, &opts, &b);
    if (rc != DLOCK_OK && !b.broken)
        return cli_fail_call(what, rc);
    if (!b.broken) {
        cli_errline("%s: not held: nothing to break", what);
        return CLI_EXIT_LOST;
    }
    /* Said even when a later part failed (the fence key's raise): the break stands. */
    if (cli->json) {
        cli_print_break(name, &b, true, "");
        fputs("\n", stdout);
    } else if (!cli->quiet) {
        fputs("broke ", stdout);
        cli_write_safe(stdout, name, strlen(name));
        fputs(": evicted ", stdout);
        write_evicted(stdout, b.holder, true);
        printf("; fence raised to %" PRIu64 "\n", b.fence);
    }
    return rc == DLOCK_OK ? 0 : cli_fail_call(what, rc);
}

static const char *kind_word(int kind)
{
    return kind == DLOCK_KIND_SEMAPHORE ? "semaphore"
           : kind == DLOCK_KIND_SHARED  ? "shared"
                                        : "exclusive";
}

static void print_listed_json(const dlock_listed *l, bool first)
{
    fputs(first ? "\n{\"name\":" : ",\n{\"name\":", stdout);
    cli_write_json_string(stdout, l->name, strlen(l->name));
    printf(",\"kind\":\"%s\",\"holders\":[", kind_word(l->kind));
    for (int i = 0; i < l->nlisted; i++) {
        const dlock_holder *h = &l->holders[i];
        fputs(i ? ",{\"holder\":" : "{\"holder\":", stdout);
        cli_write_json_string(stdout, h->description,
                              strnlen(h->description, sizeof h->description));
        printf(",\"remaining_ms\":%" PRId64 "}", h->remaining_ms);
    }
    printf("],\"nholders\":%" PRId64 ",\"permits\":%" PRId64 ",\"remaining_ms\":%" PRId64
           ",\"fence\":%" PRIu64 ",\"waiters\":%" PRId64 "}",
           l->nholders, l->permits, l->remaining_ms, l->fence, l->waiters);
}

/* NAME  KIND  HOLDER[, HOLDER...]  LEFT  fence F  waiters W */
static void print_listed_text(const dlock_listed *l)
{
    char left[32];
    cli_write_safe(stdout, l->name, strlen(l->name));
    if (l->kind == DLOCK_KIND_SEMAPHORE)
        printf("  semaphore of %" PRId64 "  ", l->permits);
    else
        printf("  %s  ", kind_word(l->kind));
    for (int i = 0; i < l->nlisted; i++) {
        const dlock_holder *h = &l->holders[i];
        if (i > 0)
            fputs(", ", stdout);
        size_t len = strnlen(h->description, sizeof h->description);
        if (len > 0)
            cli_write_safe(stdout, h->description, len);
        else
            fputs("an unknown holder", stdout);
    }
    if (l->nholders > l->nlisted)
        printf(" and %" PRId64 " more", l->nholders - l->nlisted);
    if (l->remaining_ms >= 0)
        printf("  %s left", cli_format_duration(l->remaining_ms, left, sizeof left));
    else
        fputs("  no expiry", stdout);
    printf("  fence %" PRIu64 "  waiters %" PRId64 "\n", l->fence, l->waiters);
}

int cli_cmd_list(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    const char *pattern = args[0] != NULL ? args[0] : "*";
    int code = cli_client_open(cli);
    if (code != 0)
        return code;
    dlock_lister *it;
    int rc = dlock_list(cli->client, pattern, &it);
    if (rc != DLOCK_OK)
        return cli_fail_call("list", rc);
    const dlock_listed *l;
    bool first = true;
    if (cli->json)
        fputs("[", stdout);
    while ((rc = dlock_list_next(it, &l)) == DLOCK_OK && l != NULL) {
        if (cli->json)
            print_listed_json(l, first);
        else
            print_listed_text(l);
        first = false;
    }
    if (cli->json)
        fputs(first ? "]\n" : "\n]\n", stdout);
    dlock_list_free(it);
    return rc == DLOCK_OK ? 0 : cli_fail_call("list", rc);
}
