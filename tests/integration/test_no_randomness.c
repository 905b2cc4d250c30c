/*
 * test_no_randomness.c: the kernel refusing getrandom(2), for real. A child process
 * installs a seccomp filter (libseccomp) under which the system call fails with
 * ENOSYS, as on a kernel without it, or EPERM, as under a container's seccomp profile
 * that does not know it.
 *
 * Every call that needs a secret then fails with DLOCK_ERR_IO and "getrandom" in its
 * detail, before anything is sent: a new client (its wake-up channel is random), a
 * lock or a permit (the token), a stock reservation (its id), a local lock (its
 * token). Nothing is taken on the server. A thread that drew its tokens before goes
 * on with them: the failure stays where randomness was needed.
 *
 * Tokens come from a per-thread pool (src/token.c), so the calls that must fail run
 * on a thread started after the filter, whose pool is empty.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child, cmocka's asserts cannot report: a failed check prints its line and
 * the child exits 1, which the parent asserts is 0. */
#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child: %s:%d: check failed: %s (dlock_errmsg: %s)\n", __FILE__,       \
                    __LINE__, #cond, dlock_errmsg());                                              \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

/* What a thread's call returned, and its detail. */
typedef struct outcome {
    int rc;
    char msg[256];
} outcome;

typedef struct calls {
    dlock_client *c, *local;
    outcome client, lock, sem, reserve, local_lock;
    bool client_left_null;
} calls;

static void keep(outcome *o, int rc)
{
    o->rc = rc;
    snprintf(o->msg, sizeof o->msg, "%s", rc == DLOCK_OK ? "" : dlock_errmsg());
}

/* On a new thread: its token pool is empty, so each call must draw from the kernel. */
static void *needs_randomness(void *arg)
{
    calls *k = arg;
    /* A new client needs a random wake-up channel. */
    dlock_client *none = (dlock_client *)&none; /* a call that fails overwrites it */
    keep(&k->client, dlock_client_new(it_srv.url, NULL, &none));
    k->client_left_null = none == NULL;
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    dlock_lock *l = NULL;
    keep(&k->lock, dlock_acquire(k->c, "norandom", &o, &l));
    keep(&k->sem, dlock_sem_acquire(k->c, "norandom-sem", 3, &o, &l));
    char id[DLOCK_TOKEN_LEN + 1];
    keep(&k->reserve, dlock_stock_reserve(k->c, "norandom-sku", 1, NULL, id));
    keep(&k->local_lock, dlock_acquire(k->local, "norandom", &o, &l));
    return NULL;
}

static bool refused_for_randomness(const outcome *o)
{
    return o->rc == DLOCK_ERR_IO && strstr(o->msg, "getrandom") != NULL;
}

static long long key_exists(const char *name)
{
    char key[128];
    it_key(key, sizeof key, name);
    long long n = -1;
    redisReply *r = dh_cmd(&it_srv, "EXISTS %s", key);
    return dh_reply_integer(r, "EXISTS", &n) == 0 ? n : -1;
}

/* The child's part: the filter refusing getrandom with err, then every call. */
static void child(int err)
{
    dlock_client *c = NULL, *local = NULL;
    CHILD_CHECK(dlock_client_new(it_srv.url, NULL, &c) == DLOCK_OK);
    CHILD_CHECK(dlock_client_new(it_local_url, NULL, &local) == DLOCK_OK);
    CHILD_CHECK(dlock_stock_set(c, "norandom-sku", 5, NULL) == DLOCK_OK);

    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
    CHILD_CHECK(f != NULL);
    CHILD_CHECK(seccomp_rule_add(f, SCMP_ACT_ERRNO((uint32_t)err), SCMP_SYS(getrandom), 0) == 0);
    CHILD_CHECK(seccomp_load(f) == 0);
    seccomp_release(f);

    calls k = {.c = c, .local = local};
    pthread_t t;
    CHILD_CHECK(pthread_create(&t, NULL, needs_randomness, &k) == 0);
    CHILD_CHECK(pthread_join(t, NULL) == 0);
    CHILD_CHECK(refused_for_randomness(&k.client) && k.client_left_null);
    CHILD_CHECK(refused_for_randomness(&k.lock));
    CHILD_CHECK(refused_for_randomness(&k.sem));
    CHILD_CHECK(refused_for_randomness(&k.reserve));
    CHILD_CHECK(refused_for_randomness(&k.local_lock));
    printf("INFO no_randomness: a lock refused: %s\n", k.lock.msg);
    fflush(stdout);
    /* Refused before anything was sent: no key, no holder, no reservation. */
    CHILD_CHECK(key_exists("norandom") == 0);
    CHILD_CHECK(key_exists("norandom-sem") == 0);
    dlock_stock_info st;
    CHILD_CHECK(dlock_stock_status(c, "norandom-sku", &st) == DLOCK_OK);
    CHILD_CHECK(st.available == 5 && st.reserved == 0);

    /* This thread drew its pool before the filter: it still takes locks. */
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    dlock_lock *l = NULL;
    CHILD_CHECK(dlock_acquire(c, "norandom", &o, &l) == DLOCK_OK);
    CHILD_CHECK(key_exists("norandom") == 1);
    CHILD_CHECK(dlock_release(l) == DLOCK_OK);
    dlock_client_free(local);
    dlock_client_free(c);
    _exit(0);
}

static void getrandom_refused(void **state)
{
    int err = *(int *)*state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child(err);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    static int enosys = ENOSYS, eperm = EPERM;
    const struct CMUnitTest tests[] = {
        IT_CASE("getrandom_enosys", getrandom_refused, &enosys),
        IT_CASE("getrandom_eperm", getrandom_refused, &eperm),
    };
    return cmocka_run_group_tests_name("no_randomness", tests, it_srv_local_setup,
                                       it_srv_local_teardown);
}
