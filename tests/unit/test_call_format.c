/*
 * test_call_format.c: a script call's bytes (src/script_call.c formats them itself, in
 * one pass) are exactly what hiredis's redisFormatCommandArgv makes of the same
 * arguments, which every Redis parses: the EVALSHA form and the EVAL form, with no
 * argument, empty ones, binary ones (NUL, CR, LF), long ones, lengths whose digit count
 * changes (9, 10, 99, 100, ...), and a renewal batch's thousands; and impossible counts
 * are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* hiredis's bytes for VERB HEAD NKEYS ARGS... */
static char *hiredis_bytes(const char *verb, const char *head, int nkeys, int nargs,
                           const char *const *args, const size_t *lens, int *len)
{
    const char **argv = malloc((size_t)(3 + nargs) * sizeof *argv);
    size_t *argvlen = malloc((size_t)(3 + nargs) * sizeof *argvlen);
    assert_non_null(argv);
    assert_non_null(argvlen);
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = verb;
    argv[1] = head;
    argv[2] = nk;
    argvlen[0] = strlen(verb);
    argvlen[1] = strlen(head);
    argvlen[2] = strlen(nk);
    for (int i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argvlen[3 + i] = lens[i];
    }
    char *out = NULL;
    *len = redisFormatCommandArgv(&out, 3 + nargs, argv, argvlen);
    assert_true(*len > 0);
    free(argv);
    free(argvlen);
    return out;
}

/* The call's EVALSHA and EVAL forms equal hiredis's. */
static void expect_same(int nkeys, int nargs, const char *const *args, const size_t *lens)
{
    static dlock__scripts s;
    dlock__err e;
    assert_int_equal(dlock__scripts_init(&s, &e), DLOCK_OK);
    dlock__call call;
    assert_int_equal(
        dlock__call_format(&s, DLOCK_SCRIPT_RELEASE, nkeys, nargs, args, lens, &call, &e),
        DLOCK_OK);
    int len;
    char *want =
        hiredis_bytes("EVALSHA", s.sha[DLOCK_SCRIPT_RELEASE], nkeys, nargs, args, lens, &len);
    assert_int_equal(call.evalsha_len, len);
    assert_memory_equal(call.evalsha, want, (size_t)len);
    redisFreeCommand(want);
    assert_int_equal(dlock__call_eval(&call), DLOCK_OK);
    want = hiredis_bytes("EVAL", dlock__script_body(DLOCK_SCRIPT_RELEASE), nkeys, nargs, args, lens,
                         &len);
    assert_int_equal(call.eval_len, len);
    assert_memory_equal(call.eval, want, (size_t)len);
    redisFreeCommand(want);
    dlock__call_free(&call);
}

static void same_bytes_as_hiredis(void **state)
{
    (void)state;
    expect_same(0, 0, NULL, NULL);
    const char *one[] = {"dlock:{a}"};
    size_t one_len[] = {9};
    expect_same(1, 1, one, one_len);
    static const char bin[] = {'a', '\0', '\r', '\n', 'b'};
    const char *mixed[] = {"", bin, "x"};
    size_t mixed_len[] = {0, sizeof bin, 1};
    expect_same(2, 3, mixed, mixed_len);
    /* Lengths around each change of digit count. */
    static char big[100001];
    memset(big, 'k', sizeof big);
    static const size_t sizes[] = {9, 10, 11, 99, 100, 101, 999, 1000, 9999, 10000, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const char *a[] = {big, "v"};
        size_t l[] = {sizes[i], 1};
        expect_same(1, 2, a, l);
    }
}

static void a_batch_of_thousands(void **state)
{
    (void)state;
    enum { N = 3000 };
    const char **args = malloc(N * sizeof *args);
    size_t *lens = malloc(N * sizeof *lens);
    assert_non_null(args);
    assert_non_null(lens);
    for (int i = 0; i < N; i++) {
        args[i] = i % 2 ? "0123456789abcdef0123456789abcdef" : "dlock:{name}";
        lens[i] = strlen(args[i]);
    }
    expect_same(N / 2, N, args, lens);
    free(args);
    free(lens);
}

static void impossible_counts_refused(void **state)
{
    (void)state;
    static dlock__scripts s;
    dlock__err e;
    assert_int_equal(dlock__scripts_init(&s, &e), DLOCK_OK);
    dlock__call call;
    assert_int_equal(dlock__call_format(&s, DLOCK_SCRIPT_RELEASE, 0, -1, NULL, NULL, &call, &e),
                     DLOCK_ERR_INVALID);
    assert_non_null(strstr(e.msg, "argument count"));
    dlock__call_free(&call);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_bytes_as_hiredis),
        cmocka_unit_test(a_batch_of_thousands),
        cmocka_unit_test(impossible_counts_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
