/*
 * test_token.c: lock tokens from src/token.c's per-thread pool of getrandom bytes.
 *
 *   - every token is DLOCK_TOKEN_LEN lowercase hex characters, and no two are equal,
 *     across many refills of the pool and across threads;
 *   - fork safety: a child of fork() starts with a copy of the pool, and must not
 *     hand out the bytes its parent will use next (the pool refills when the fork
 *     generation it was filled in is not the current one), nor may a grandchild.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

enum { PER_THREAD = 2000, THREADS = 4 };

typedef char token[DLOCK_TOKEN_LEN + 1];

static int cmp_token(const void *a, const void *b)
{
    return memcmp(a, b, DLOCK_TOKEN_LEN);
}

/* True when the n tokens are all valid and all different. */
static bool all_valid_and_distinct(token *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!dlock__token_valid(t[i]))
            return false;
    qsort(t, n, sizeof *t, cmp_token);
    for (size_t i = 1; i < n; i++)
        if (memcmp(t[i - 1], t[i], DLOCK_TOKEN_LEN) == 0)
            return false;
    return true;
}

static void *fill(void *arg)
{
    token *t = arg;
    for (int i = 0; i < PER_THREAD; i++)
        if (dlock__token_new(t[i]) != DLOCK_OK)
            return (void *)1;
    return NULL;
}

static void test_distinct_across_threads(void **state)
{
    (void)state;
    token *t = calloc(PER_THREAD * THREADS, sizeof *t);
    assert_non_null(t);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, fill, t + i * PER_THREAD), 0);
    for (int i = 0; i < THREADS; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    assert_true(all_valid_and_distinct(t, PER_THREAD * THREADS));
    free(t);
}

/* The parent takes a token (so its pool is partly used), forks, and both take the
 * next few: the child's must differ from every one of the parent's. */
static void test_fork_refills(void **state)
{
    (void)state;
    enum { NEXT = 8 };
    token first, mine[NEXT], theirs[NEXT];
    assert_int_equal(dlock__token_new(first), DLOCK_OK);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        token t[NEXT];
        int ok = 1;
        for (int i = 0; i < NEXT; i++)
            ok &= dlock__token_new(t[i]) == DLOCK_OK;
        ok &= write(fds[1], t, sizeof t) == (ssize_t)sizeof t;
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    for (int i = 0; i < NEXT; i++)
        assert_int_equal(dlock__token_new(mine[i]), DLOCK_OK);
    size_t got = 0;
    while (got < sizeof theirs) {
        ssize_t r = read(fds[0], (char *)theirs + got, sizeof theirs - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    token all[2 * NEXT + 1];
    memcpy(all, mine, sizeof mine);
    memcpy(all + NEXT, theirs, sizeof theirs);
    memcpy(all[2 * NEXT], first, sizeof first);
    assert_true(all_valid_and_distinct(all, 2 * NEXT + 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_across_threads),
        cmocka_unit_test(test_fork_refills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
