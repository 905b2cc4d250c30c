/*
 * output.c: what the dlock command prints: the exit code and the error line for a
 * failed library call, the library's warnings, and the answer of `dlock status`, as
 * text for people or as one JSON object for programs.
 *
 * Every byte that comes from outside (lock names, holder descriptions, servers'
 * messages) goes through escape.c, so that none of it can break a line or the JSON.
 */
#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int cli_exit_code(int err)
{
    switch (err) {
    case DLOCK_OK:
        return 0;
    case DLOCK_ERR_INVALID:
        return CLI_EXIT_USAGE;
    case DLOCK_ERR_NOQUORUM:
    case DLOCK_ERR_IO:
    case DLOCK_ERR_TIMEOUT:
    case DLOCK_ERR_UNAVAILABLE:
        return CLI_EXIT_UNAVAILABLE;
    case DLOCK_ERR_LOST:
        return CLI_EXIT_LOST;
    case DLOCK_ERR_BUSY:
    case DLOCK_ERR_CANCELED:
        return CLI_EXIT_NOT_ACQUIRED;
    case DLOCK_ERR_AUTH:
        return CLI_EXIT_AUTH;
    case DLOCK_ERR_PROTOCOL:
        return CLI_EXIT_PROTOCOL;
    default:
        /* NOMEM, CLOSED and codes newer than this program. */
        return CLI_EXIT_INTERNAL;
    }
}

int cli_fail_call(const char *what, int err)
{
    /* The detail is copied first: it is only valid until our next dlock call. */
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", dlock_errmsg());
    /* A server that answers what no lock server would is most often not one (a
     * dlockd's port, an HTTP server's), which doctor names. */
    const char *hint = err == DLOCK_ERR_PROTOCOL ? "; `dlock doctor` tells what the server is" : "";
    if (detail[0] != '\0')
        cli_errline("%s: %s (%s)%s", what, dlock_strerror(err), detail, hint);
    else
        cli_errline("%s: %s%s", what, dlock_strerror(err), hint);
    return cli_exit_code(err);
}

void cli_log_to_stderr(void *user, int level, const char *msg)
{
    (void)user;
    /* Informational messages are dropped: scripts read our stderr, and a warning (a
     * server whose eviction policy can drop lock keys, ...) is all they need. */
    if (level <= DLOCK_LOG_WARN)
        cli_errline("warning: %s", msg);
}

void cli_write_holder(FILE *f, const dlock_holder *h)
{
    size_t len = strnlen(h->description, sizeof h->description);
    if (h->shared > 0)
        fprintf(f, "%" PRId64 " shared holder%s", h->shared, h->shared > 1 ? "s" : "");
    else if (len > 0)
        cli_write_safe(f, h->description, len);
    else
        fputs("an unknown holder", f);
}

/* "holder" is the exclusive holder (null for shared holders or none); "holders" lists
 * the shared holders and semaphore permits, each {"holder", "remaining_ms"}, and
 * "shared" counts them (the list stops at DLOCK_INSPECT_SHARED_MAX). */
static void print_status_json(const char *name, const dlock_holder *h, const dlock_holder *shared,
                              int n, const dlock_break_info *b)
{
    fputs("{\"name\":", stdout);
    cli_write_json_string(stdout, name, strlen(name));
    if (h->held && h->shared == 0) {
        fputs(",\"state\":\"held\",\"holder\":", stdout);
        cli_write_json_string(stdout, h->description,
                              strnlen(h->description, sizeof h->description));
    } else {
        printf(",\"state\":\"%s\",\"holder\":null", h->held ? "held" : "free");
    }
    printf(",\"remaining_ms\":%" PRId64 ",\"fence\":%" PRIu64 ",\"shared\":%" PRId64
           ",\"holders\":[",
           h->held ? h->remaining_ms : 0, h->fence, h->shared);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",{\"holder\":" : "{\"holder\":", stdout);
        cli_write_json_string(stdout, shared[i].description,
                              strnlen(shared[i].description, sizeof shared[i].description));
        printf(",\"remaining_ms\":%" PRId64 "}", shared[i].remaining_ms);
    }
    fputs("],\"broken\":", stdout);
    if (b->broken)
        cli_print_break(name, b, true, "  last "); /* as the text form: the token cut */
    else
        fputs("null", stdout);
    fputs("}\n", stdout);
}

static void print_status_text(const char *name, const dlock_holder *h, const dlock_holder *shared,
                              int n, const dlock_break_info *b)
{
    cli_write_safe(stdout, name, strlen(name));
    if (h->held) {
        fputs(": held by ", stdout);
        cli_write_holder(stdout, h);
        char left[32];
        if (h->remaining_ms >= 0)
            printf(", %s left", cli_format_duration(h->remaining_ms, left, sizeof left));
        else
            fputs(", no expiry", stdout); /* a key someone set without a lease */
        printf(", fence %" PRIu64 "\n", h->fence);
        for (int i = 0; i < n; i++) {
            fputs("  ", stdout);
            cli_write_holder(stdout, &shared[i]);
            printf(", %s left\n", cli_format_duration(shared[i].remaining_ms, left, sizeof left));
        }
        if (h->shared > n)
            printf("  and %" PRId64 " more\n", h->shared - n);
    } else if (h->fence > 0) {
        printf(": free (last fence %" PRIu64 ")\n", h->fence);
    } else {
        fputs(": free\n", stdout);
    }
    if (b->broken)
        cli_print_break(name, b, false, "  last ");
}

void cli_print_status(const char *name, const dlock_holder *h, const dlock_holder *shared, int n,
                      const dlock_break_info *b, bool json)
{
    if (json)
        print_status_json(name, h, shared, n, b);
    else
        print_status_text(name, h, shared, n, b);
}
