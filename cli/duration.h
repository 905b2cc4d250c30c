/*
 * duration.h: the durations of the dlock command line (-t TTL, -w WAIT).
 *
 * A duration is a decimal number followed by a unit, ms, s, m, h or d, with no space
 * between (a bare number is seconds): "250ms", "1.5s", "0.5m", "2h". The value is
 * computed exactly, from the digits, in whole milliseconds; a value that is not a
 * whole number of milliseconds ("1.0005s", "1.5ms") is refused rather than rounded,
 * so that what the user typed is what the servers get.
 *
 * Pure code: no I/O, no globals, no allocation. The lease limits come from dlock.h
 * (macros only) so that the command and the library agree on them.
 */
#ifndef DLOCK_CLI_DURATION_H
#define DLOCK_CLI_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* What cli_parse_wait stores for "forever" (dlock_opts.wait_ms's "wait forever"). */
#define CLI_WAIT_FOREVER (-1)

/*
 * Parse a duration of 0 ms or more into *out_ms. Returns 0, or -1 with a one-line
 * reason in err (which does not repeat the input) and *out_ms untouched.
 * Refused: NULL or empty, a sign, leading or trailing spaces, a missing digit on
 * either side of the '.', exponents, hex, "nan"/"inf", an unknown unit, a fraction
 * finer than 1 ms, and anything past INT64_MAX ms.
 */
int cli_parse_duration(const char *s, int64_t *out_ms, char *err, size_t errlen);

/* A lease: a duration in [DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS]; 0 is refused (it
 * would mean "the default" to the library, and "no lease" to a user). */
int cli_parse_ttl(const char *s, int64_t *out_ms, char *err, size_t errlen);

/* A wait: "forever" (CLI_WAIT_FOREVER) or any duration, 0 meaning "try once". */
int cli_parse_wait(const char *s, int64_t *out_ms, char *err, size_t errlen);

/*
 * Write ms for a human into buf (always NUL-terminated when buflen > 0): "850ms",
 * "2.9s" (tenths, rounded down: never more time than is left), "4m05s", "2h03m".
 * A negative ms is written as "0ms". Returns buf.
 */
char *cli_format_duration(int64_t ms, char *buf, size_t buflen);

#endif /* DLOCK_CLI_DURATION_H */
