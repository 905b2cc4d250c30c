/*
 * urltest.c: the URL tests' shared checks (urltest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "urltest.h"

void parse_ok(const char *url, dlock__addr *a)
{
    dlock__err e = {""};
    int rc = dlock__url_parse(url, strlen(url), a, &e);
    if (rc != DLOCK_OK)
        fail_msg("\"%s\": %s (%s)", url, dlock_errname(rc), e.msg);
    assert_non_null(a->display);
    /* The display string goes into messages and logs: never the password. */
    if (a->password != NULL && strstr(a->display, a->password) != NULL)
        fail_msg("\"%s\": display \"%s\" shows the password", url, a->display);
}

void parse_bad(const char *url, const char *why)
{
    dlock__addr a;
    memset(&a, 0x5a, sizeof a); /* whatever was there before must not matter */
    dlock__err e = {""};
    int rc = dlock__url_parse(url, strlen(url), &a, &e);
    if (rc != DLOCK_ERR_INVALID) {
        if (rc == DLOCK_OK)
            dlock__addr_clear(&a);
        fail_msg("\"%s\": %s, want DLOCK_ERR_INVALID", url, dlock_errname(rc));
    }
    if (strstr(e.msg, why) == NULL)
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", url, e.msg, why);
    /* Nothing is left owned by a failed parse (ASan's leak check would say so). */
    assert_null(a.host);
    assert_null(a.path);
    assert_null(a.user);
    assert_null(a.password);
    assert_null(a.display);
    assert_null(a.cacert);
    assert_null(a.key);
}

dlock__addr *list_ok(const char *list, int max, int n_want)
{
    dlock__addr *addrs = NULL;
    int n = -1;
    dlock__err e = {""};
    int rc = dlock__url_parse_list(list, max, &addrs, &n, &e);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(n, n_want);
    return addrs;
}

void list_free(dlock__addr *addrs, int n)
{
    for (int i = 0; i < n; i++)
        dlock__addr_clear(&addrs[i]);
    free(addrs);
}
