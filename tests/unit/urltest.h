/*
 * urltest.h: the checks test_url.c and test_url_hosts.c share on src/url.c's parsers:
 * a URL accepted or refused (with the reason its message must name), a list accepted.
 *
 * Include after <cmocka.h>: the checks assert.
 */
#ifndef DLOCK_URLTEST_H
#define DLOCK_URLTEST_H

#include "internal.h"

/* Parse a whole NUL-terminated URL into *a and expect success; its display string must
 * not show its password. The caller clears *a. */
void parse_ok(const char *url, dlock__addr *a);
/* Expect url refused as DLOCK_ERR_INVALID with `why` in the message, and nothing left
 * owned by the failed parse. */
void parse_bad(const char *url, const char *why);
/* Parse a list that must be accepted with n_want servers; free with list_free. */
dlock__addr *list_ok(const char *list, int max, int n_want);
/* Clear the n addresses of a list and free it. */
void list_free(dlock__addr *addrs, int n);

#endif /* DLOCK_URLTEST_H */
