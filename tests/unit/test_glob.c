/*
 * test_glob.c: dlock_list's glob (src/glob.c): the shell's and SCAN's syntax over any
 * bytes, and a pattern that makes backtracking matchers exponential answered at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"

#include <stdlib.h>
#include <string.h>

static bool m(const char *pat, const char *str)
{
    return dlock__glob_match(pat, strlen(pat), str, strlen(str));
}

static void test_syntax(void **state)
{
    (void)state;
    assert_true(m("*", ""));
    assert_true(m("*", "anything"));
    assert_true(m("", ""));
    assert_false(m("", "x"));
    assert_true(m("job:*", "job:nightly"));
    assert_false(m("job:*", "jobs:nightly"));
    assert_true(m("*:nightly", "job:nightly"));
    assert_true(m("a*b*c", "aXXbYYc"));
    assert_false(m("a*b*c", "aXXbYY"));
    assert_true(m("a*b", "abab"));
    assert_true(m("h?llo", "hello"));
    assert_false(m("h?llo", "hllo"));
    assert_true(m("h[ae]llo", "hallo"));
    assert_false(m("h[ae]llo", "hillo"));
    assert_true(m("h[a-c]llo", "hbllo"));
    assert_true(m("h[c-a]llo", "hbllo")); /* a reversed range, as Redis takes it */
    assert_true(m("h[!a]llo", "hbllo"));
    assert_false(m("h[^a]llo", "hallo"));
    assert_true(m("[]]x", "]x")); /* ']' first in a set is a member */
    assert_true(m("a[", "a["));   /* a set without its ']' is the byte '[' */
    assert_true(m("star\\*name", "star*name"));
    assert_false(m("star\\*name", "starXname"));
    assert_true(m("\\?", "?"));
    assert_true(m("[\\]]", "]"));
    assert_true(m("tab?name", "tab\tname"));
    /* Bytes, not characters: a UTF-8 name's bytes match one '?' each. */
    assert_true(m("caf??", "caf\xc3\xa9"));
    assert_true(m("**a**", "xa"));
}

/* 4,000 a's and a pattern of 20 stars that cannot match: a backtracking matcher takes
 * of the order of 4000^19 steps; this one, at most 4000 x 40. */
static void test_no_blowup(void **state)
{
    (void)state;
    enum { N = 4000 };
    char *s = malloc(N + 1);
    memset(s, 'a', N);
    s[N] = '\0';
    char pat[64] = "";
    for (int i = 0; i < 20; i++)
        strcat(pat, "*a");
    strcat(pat, "b");
    assert_false(m(pat, s));
    pat[strlen(pat) - 1] = '\0';
    assert_true(m(pat, s));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_no_blowup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
