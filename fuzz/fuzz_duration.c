/*
 * fuzz_duration.c: the command line's durations (cli/duration.c). It is one of the
 * targets of scenario 17 (fuzzing) of the fault suite, in docs/guarantees.md.
 *
 * The input is one argument as the shell would pass it (cut at a NUL byte, as argv
 * is). Beside "no crash, no read past the NUL", the parser is checked against an
 * independent reading of the grammar in cli/duration.h, done here with 128-bit
 * arithmetic instead of the parser's digit-by-digit overflow checks:
 *
 *     duration = digit+ [ "." digit+ ] [ "ms" | "s" | "m" | "h" | "d" ]     (bare: seconds)
 *     value    = exactly (whole + fraction) * unit, in whole ms, at most INT64_MAX
 *
 * Both must accept the same strings with the same value; a lease and a wait follow
 * from it (their ranges, "forever"). cli_format_duration is run on the value and on
 * the input's first 8 bytes as an int64: its output always fits the buffer with its
 * NUL, a shorter buffer gets a prefix of the longer one's text, and a "ms" or "s"
 * form read back never gives more time than the value.
 */
#include "duration.h"

#include "dlock.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 128-bit integers are a GNU extension; __extension__ keeps -Wpedantic quiet. */
__extension__ typedef unsigned __int128 u128;

/* The reference reading: true and *out when s is a valid duration. */
static bool reference(const char *s, int64_t *out)
{
    const char *p = s;
    u128 whole = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        /* Past 10^30 the value is far beyond INT64_MAX ms whatever the unit; keep
         * reading the digits, stop adding them. */
        if (whole < (u128)1000000000000000ULL * 1000000000000000ULL)
            whole = whole * 10 + (u128)(*p - '0');
    }
    if (digits == 0)
        return false;
    const char *frac = NULL;
    size_t flen = 0;
    if (*p == '.') {
        frac = ++p;
        for (; *p >= '0' && *p <= '9'; p++)
            flen++;
        if (flen == 0)
            return false;
    }
    u128 unit;
    if (*p == '\0' || strcmp(p, "s") == 0)
        unit = 1000;
    else if (strcmp(p, "ms") == 0)
        unit = 1;
    else if (strcmp(p, "m") == 0)
        unit = 60000;
    else if (strcmp(p, "h") == 0)
        unit = 3600000;
    else if (strcmp(p, "d") == 0)
        unit = 86400000;
    else
        return false;
    while (flen > 0 && frac[flen - 1] == '0')
        flen--;
    /* A fraction of more than 18 significant digits cannot be exact: checked below by
     * the arithmetic for shorter ones, refused here for longer ones (10^19 would not
     * fit the numbers used). 10 would do (see duration.c); 18 leaves the proof to the
     * arithmetic. */
    if (flen > 18)
        return false;
    u128 num = 0, den = 1;
    for (size_t i = 0; i < flen; i++) {
        num = num * 10 + (u128)(frac[i] - '0');
        den *= 10;
    }
    if ((num * unit) % den != 0)
        return false;
    u128 total = whole * unit + num * unit / den;
    if (total > (u128)INT64_MAX)
        return false;
    *out = (int64_t)total;
    return true;
}

/* The "850ms" and "2.9s" forms, read back with the parser; others return false. */
static bool read_back(const char *text, int64_t *out)
{
    size_t n = strlen(text);
    bool simple = (n > 2 && strcmp(text + n - 2, "ms") == 0) ||
                  (n > 1 && text[n - 1] == 's' && strchr(text, 'm') == NULL);
    return simple && cli_parse_duration(text, out, NULL, 0) == 0;
}

static void check_format(int64_t ms)
{
    char full[64];
    cli_format_duration(ms, full, sizeof full);
    size_t len = strlen(full);
    assert(len > 0 && len < sizeof full);
    for (size_t cap = 1; cap <= len + 1; cap++) {
        char small[64];
        memset(small, 'Z', sizeof small);
        assert(cli_format_duration(ms, small, cap) == small);
        assert(memchr(small, '\0', cap) != NULL); /* terminated within the buffer */
        assert(small[cap] == 'Z');                /* and not a byte past it */
        assert(strncmp(small, full, cap - 1) == 0);
    }
    int64_t back;
    if (read_back(full, &back))
        assert(back <= (ms < 0 ? 0 : ms));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    assert(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';

    char err[128];
    int64_t ms = -7, want = -7;
    err[0] = '\0';
    int rc = cli_parse_duration(s, &ms, err, sizeof err);
    bool ok = reference(s, &want);
    assert((rc == 0) == ok);
    if (ok) {
        assert(ms == want && ms >= 0);
        check_format(ms);
    } else {
        assert(rc == -1 && ms == -7 && err[0] != '\0');
        /* One line: the CLI prints it after its own prefix. */
        assert(strchr(err, '\n') == NULL);
    }

    int64_t ttl = -7;
    rc = cli_parse_ttl(s, &ttl, err, sizeof err);
    bool ttl_ok = ok && want >= DLOCK_TTL_MIN_MS && want <= DLOCK_TTL_MAX_MS;
    assert((rc == 0) == ttl_ok);
    assert(ttl == (ttl_ok ? want : -7));

    int64_t wait = -7;
    rc = cli_parse_wait(s, &wait, err, sizeof err);
    if (strcmp(s, "forever") == 0)
        assert(rc == 0 && wait == CLI_WAIT_FOREVER);
    else
        assert((rc == 0) == ok && wait == (ok ? want : -7));

    /* A NULL or zero-sized message buffer is allowed. */
    rc = cli_parse_duration(s, &ms, NULL, 0);
    assert((rc == 0) == ok);

    if (size >= 8) {
        int64_t raw;
        memcpy(&raw, data, sizeof raw);
        check_format(raw);
    }
    free(s);
    return 0;
}
