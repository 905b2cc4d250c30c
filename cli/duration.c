/*
 * duration.c: parsing and printing the durations of the dlock command line.
 *
 * The number is read digit by digit instead of with strtod: a double cannot hold
 * 0.1 exactly, and "0.3s" must be 300 ms, not 299. The integer part and the
 * fraction are kept apart as integers and combined only once the unit is known.
 */
#include "duration.h"

#include "dlock.h" /* DLOCK_TTL_MIN_MS and DLOCK_TTL_MAX_MS only: no library call */

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Units, longest name first so that "ms" is not read as "m" followed by junk. */
static const struct unit {
    const char *name;
    int64_t ms;
} units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {"d", 24 * 60 * 60 * 1000}};

/* Fraction digits that can still matter, trailing zeros aside. Every unit divides
 * 86,400,000 ms = 2^10 * 3^3 * 5^5 ms, so a fraction with more than 10 significant
 * digits (the last one not 0) can never come to a whole number of ms: its numerator
 * lacks either every factor 2 or every factor 5 that 10^digits needs. */
#define FRACTION_DIGITS_MAX 10

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* isdigit() depends on the locale and is undefined for negative chars. */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int cli_parse_duration(const char *s, int64_t *out_ms, char *err, size_t errlen)
{
    static const char hint[] = "expected a number with ms, s, m, h or d, e.g. 1.5s";
    if (s == NULL || *s == '\0')
        return fail(err, errlen, "empty duration (%s)", hint);
    if (*s == '-')
        return fail(err, errlen, "a duration cannot be negative");
    if (*s == '.')
        return fail(err, errlen, "a digit is needed before the '.' (write 0.5s, not .5s)");
    if (!is_digit(*s))
        return fail(err, errlen, "not a duration (%s)", hint);

    /* Integer part. Past the overflow keep scanning, so that "99999999999999999999x"
     * is reported for its unit first and only then as too large. */
    const char *p = s;
    uint64_t whole = 0;
    bool overflow = false;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > ((uint64_t)INT64_MAX - d) / 10)
            overflow = true;
        else
            whole = whole * 10 + d;
    }

    /* Fraction: remember where its digits are; their value is taken after the unit. */
    const char *frac = NULL;
    size_t frac_len = 0;
    if (*p == '.') {
        p++;
        if (!is_digit(*p))
            return fail(err, errlen, "a digit is needed after the '.' (write 1.0s or 1s)");
        frac = p;
        while (is_digit(*p))
            p++;
        frac_len = (size_t)(p - frac);
    }

    const struct unit *unit = NULL;
    if (*p == '\0') {
        unit = &units[1]; /* a bare number is seconds */
    } else {
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (strcmp(p, units[i].name) == 0) {
                unit = &units[i];
                break;
            }
        if (unit == NULL) {
            /* Quote what we read, but keep the message one printable line. */
            char shown[17];
            size_t i = 0;
            for (; i < sizeof shown - 1 && p[i] != '\0'; i++)
                shown[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
            shown[i] = '\0';
            return fail(err, errlen, "unknown unit \"%s\" (use ms, s, m, h or d, e.g. 1.5s)",
                        shown);
        }
    }

    /* The fraction in whole ms: digits * unit / 10^len, which must divide exactly. */
    while (frac_len > 0 && frac[frac_len - 1] == '0')
        frac_len--;
    int64_t frac_ms = 0;
    if (frac_len > 0) {
        if (frac_len > FRACTION_DIGITS_MAX)
            return fail(err, errlen, "finer than 1 ms (durations are whole milliseconds)");
        int64_t num = 0, den = 1;
        for (size_t i = 0; i < frac_len; i++) {
            num = num * 10 + (frac[i] - '0');
            den *= 10;
        }
        /* num < 10^10 and unit <= 8.64e7: the product stays below INT64_MAX. */
        num *= unit->ms;
        if (num % den != 0)
            return fail(err, errlen, "finer than 1 ms (durations are whole milliseconds)");
        frac_ms = num / den;
    }

    if (overflow || whole > (uint64_t)(INT64_MAX - frac_ms) / (uint64_t)unit->ms)
        return fail(err, errlen, "too large (at most %lld ms)", (long long)INT64_MAX);
    *out_ms = (int64_t)whole * unit->ms + frac_ms;
    return 0;
}

int cli_parse_ttl(const char *s, int64_t *out_ms, char *err, size_t errlen)
{
    int64_t ms;
    if (cli_parse_duration(s, &ms, err, errlen) != 0)
        return -1;
    /* Say what the range is in every refusal: "too short" alone leaves a user guessing. */
    if (ms == 0)
        return fail(err, errlen, "a lease of 0 is not allowed (from %dms to %lldms)",
                    DLOCK_TTL_MIN_MS, (long long)DLOCK_TTL_MAX_MS);
    if (ms < DLOCK_TTL_MIN_MS || ms > DLOCK_TTL_MAX_MS)
        return fail(err, errlen, "a lease must be from %dms to %lldms (about 24.8 days)",
                    DLOCK_TTL_MIN_MS, (long long)DLOCK_TTL_MAX_MS);
    *out_ms = ms;
    return 0;
}

int cli_parse_wait(const char *s, int64_t *out_ms, char *err, size_t errlen)
{
    if (s != NULL && strcmp(s, "forever") == 0) {
        *out_ms = CLI_WAIT_FOREVER;
        return 0;
    }
    return cli_parse_duration(s, out_ms, err, errlen);
}

char *cli_format_duration(int64_t ms, char *buf, size_t buflen)
{
    if (buflen == 0)
        return buf;
    if (ms < 0)
        ms = 0;
    long long v = (long long)ms;
    if (v < 1000)
        snprintf(buf, buflen, "%lldms", v);
    else if (v < 60 * 1000)
        snprintf(buf, buflen, "%lld.%llds", v / 1000, v % 1000 / 100);
    else if (v < 60 * 60 * 1000)
        snprintf(buf, buflen, "%lldm%02llds", v / 60000, v % 60000 / 1000);
    else
        snprintf(buf, buflen, "%lldh%02lldm", v / 3600000, v % 3600000 / 60000);
    return buf;
}
