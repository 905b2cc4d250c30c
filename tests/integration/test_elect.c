/*
 * test_elect.c: leader election (dlock_elect, dlock_proclaim, dlock_resign,
 * dlock_leader, dlock_observe) against real redis-server processes, on one server and
 * on three.
 *
 * What is checked, exactly: a leader's term is its lock's fence and what dlock_leader
 * reads (value, holder "host:pid", a lease left); a second candidate is refused while
 * one leads; a proclamation changes the value in the same term; a resignation leaves
 * no leader and hands the lock to a waiting candidate, whose term is larger; misuse is
 * refused. An observer (fd form, and callback form) hears the state it starts in,
 * each of those changes in term order and no term twice, "no one leads" when a leader
 * stops renewing (its lease ends with no campaigner) within the lease plus a margin,
 * and sends no command while the leader only renews (the servers' script calls over
 * an idle window are the renewals alone); an observer made right after another on the
 * same name was freed still hears; a leader's dlock_extend past its renewal keeps it
 * the leader; a campaign in steps (dlock_elect_start) waits behind a leader and leads
 * after it resigns, its announcement a blocking step; a leader's lock released with its
 * token from elsewhere, or broken, is heard as "no one leads" at once, not at its
 * lease's end. Five candidate processes, the leader
 * SIGKILLed twice: the next leads within the lease plus a margin, with a larger term.
 * A leader SIGSTOPped past its lease: the next leader's term is larger, and after
 * SIGCONT the old leader finds itself lost and its fenced write refused. FIG lines:
 * failover ms, terms seen, fenced writes refused, script calls of idle observers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The lease of the tests whose leaders die: short, so that a failover is quick. */
#define TTL_MS 1000

static dlock_lock *elect(dlock_client *c, const char *name, const char *value, int64_t wait_ms,
                         int64_t ttl_ms)
{
    dlock_elect_opts o;
    memset(&o, 0, sizeof o);
    o.lock.ttl_ms = ttl_ms;
    o.lock.wait_ms = wait_ms;
    o.value = value;
    dlock_lock *l = NULL;
    int rc = dlock_elect(c, name, &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("dlock_elect(%s): %s (%s)", name, dlock_errname(rc), dlock_errmsg());
    return l;
}

static dlock_leader_info leader_of(dlock_client *c, const char *name)
{
    dlock_leader_info info;
    int rc = dlock_leader(c, name, &info);
    if (rc != DLOCK_OK)
        fail_msg("dlock_leader(%s): %s (%s)", name, dlock_errname(rc), dlock_errmsg());
    return info;
}

/* The next change an observer (fd form) reports, waiting up to ms (times the slack). */
static dlock_leader_info next_change(dlock_observer *o, int64_t ms)
{
    struct pollfd p = {.fd = dlock_observer_fd(o), .events = POLLIN};
    int n = poll(&p, 1, (int)(ms * dh_slack()));
    if (n != 1)
        fail_msg("no change reported within %lld ms", (long long)(ms * dh_slack()));
    dlock_leader_info info;
    assert_int_equal(dlock_observer_next(o, &info), DLOCK_OK);
    return info;
}

static void expect_quiet(dlock_observer *o, int64_t ms)
{
    struct pollfd p = {.fd = dlock_observer_fd(o), .events = POLLIN};
    if (poll(&p, 1, (int)ms) != 0) {
        dlock_leader_info info;
        assert_int_equal(dlock_observer_next(o, &info), DLOCK_OK);
        fail_msg("unexpected change: term %llu value \"%s\"", (unsigned long long)info.term,
                 info.value);
    }
}

static void test_elect_basics(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *d = it_nodes_client();
    dlock_leader_info info = leader_of(c, "eb");
    assert_int_equal(info.term, 0);

    dlock_lock *a = elect(c, "eb", "10.0.0.1:8080", 0, 5000);
    assert_true(dlock_fence(a) > 0);
    info = leader_of(d, "eb");
    assert_int_equal(info.term, dlock_fence(a));
    assert_string_equal(info.value, "10.0.0.1:8080");
    char pid[32];
    snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    assert_non_null(strstr(info.holder, pid));
    assert_true(info.remaining_ms > 3000 && info.remaining_ms <= 5000);

    /* One leads at a time. */
    dlock_elect_opts o;
    memset(&o, 0, sizeof o);
    dlock_lock *b = NULL;
    assert_int_equal(dlock_elect(d, "eb", &o, &b), DLOCK_ERR_BUSY);
    assert_null(b);

    assert_int_equal(dlock_proclaim(a, "10.0.0.2:8080"), DLOCK_OK);
    info = leader_of(d, "eb");
    assert_int_equal(info.term, dlock_fence(a));
    assert_string_equal(info.value, "10.0.0.2:8080");

    /* Misuse. */
    char big[DLOCK_LEADER_VALUE_MAX + 2];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(dlock_proclaim(a, big), DLOCK_ERR_INVALID);
    o.value = big;
    assert_int_equal(dlock_elect(d, "eb2", &o, &b), DLOCK_ERR_INVALID);
    o.value = NULL;
    o.lock.shared = 1;
    assert_int_equal(dlock_elect(d, "eb2", &o, &b), DLOCK_ERR_INVALID);
    o.lock.shared = 0;
    assert_int_equal(dlock_elect(d, "eb2", &o, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_elect(d, NULL, &o, &b), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_leader(d, "eb", NULL), DLOCK_ERR_INVALID);
    dlock_lock *plain = it_acquire(d, "eb3", 5000);
    assert_int_equal(dlock_proclaim(plain, "x"), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_leader(d, "eb3", &info), DLOCK_OK);
    assert_int_equal(info.term, 0); /* a lock whose holder announced nothing */
    assert_int_equal(dlock_release(plain), DLOCK_OK);

    /* A resignation hands the lock to the waiting candidate, with a larger term. */
    uint64_t first = dlock_fence(a);
    assert_int_equal(dlock_resign(a), DLOCK_OK);
    info = leader_of(d, "eb");
    assert_int_equal(info.term, 0);
    b = elect(d, "eb", "second", 0, 5000);
    assert_true(dlock_fence(b) > first);
    assert_int_equal(leader_of(c, "eb").term, dlock_fence(b));
    assert_int_equal(dlock_resign(b), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(d);
}

struct heard {
    pthread_mutex_t mu;
    int n;
    dlock_leader_info got[16];
};

static void on_change(const dlock_leader_info *info, void *user)
{
    struct heard *h = user;
    pthread_mutex_lock(&h->mu);
    if (h->n < 16)
        h->got[h->n++] = *info;
    pthread_mutex_unlock(&h->mu);
}

static void test_observer(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *w = it_nodes_client();
    dlock_observer *o;
    assert_int_equal(dlock_observe(c, "ob", NULL, NULL, &o), DLOCK_OK);
    struct heard h = {.mu = PTHREAD_MUTEX_INITIALIZER};
    dlock_observer *cb;
    assert_int_equal(dlock_observe(w, "ob", on_change, &h, &cb), DLOCK_OK);
    assert_int_equal(next_change(o, 2000).term, 0); /* the state it starts in */
    /* The callback form's too, before anything changes: a change made before an
     * observer's subscription is confirmed is one it may skip. */
    int64_t until = dh_now_ms() + 2000 * dh_slack();
    for (;;) {
        pthread_mutex_lock(&h.mu);
        int n = h.n;
        pthread_mutex_unlock(&h.mu);
        if (n > 0)
            break;
        if (dh_now_ms() > until)
            fail_msg("the callback observer reported no state");
        dh_sleep_ms(5);
    }

    int64_t ttl = 600;
    dlock_lock *a = elect(w, "ob", "a", 0, ttl);
    dlock_leader_info info = next_change(o, 1000);
    assert_int_equal(info.term, dlock_fence(a));
    assert_string_equal(info.value, "a");
    assert_int_equal(dlock_proclaim(a, "a2"), DLOCK_OK);
    info = next_change(o, 1000);
    assert_int_equal(info.term, dlock_fence(a));
    assert_string_equal(info.value, "a2");

    /* Idle: the leader renews every ttl/3, the observers ask nothing. Ten more of
     * them, to make any asking show. */
    dlock_observer *more[10];
    for (int i = 0; i < 10; i++)
        assert_int_equal(dlock_observe(c, "ob", NULL, NULL, &more[i]), DLOCK_OK);
    dh_sleep_ms(500 * dh_slack()); /* their first reads */
    long long before = 0, after = 0;
    for (int i = 0; i < it_nodes; i++)
        before += it_script_calls(&it_node[i]);
    int64_t window = 2000;
    expect_quiet(o, window);
    for (int i = 0; i < it_nodes; i++)
        after += it_script_calls(&it_node[i]);
    long long renewals = it_nodes * (window / (ttl / 3) + 2);
    printf("FIG elect_idle_observers=11 script_calls=%lld renewals_at_most=%lld window_ms=%lld\n",
           after - before, renewals, (long long)window);
    assert_true(after - before <= renewals);
    for (int i = 0; i < 10; i++) {
        info = next_change(more[i], 100);
        assert_int_equal(info.term, dlock_fence(a));
        dlock_observer_free(more[i]);
    }

    /* A resignation: no one leads; then a waiting candidate's larger term. */
    uint64_t t1 = dlock_fence(a);
    assert_int_equal(dlock_resign(a), DLOCK_OK);
    assert_int_equal(next_change(o, 1000).term, 0);
    dlock_lock *b = elect(w, "ob", "b", 0, ttl);
    info = next_change(o, 1000);
    assert_true(info.term > t1);
    assert_string_equal(info.value, "b");

    /* A leader that stops renewing (detached: its lease runs out with no campaigner):
     * "no one leads" once the lease ended, not before. */
    assert_int_equal(dlock_lock_detach(b), DLOCK_OK);
    int64_t t0 = dh_now_ms();
    assert_int_equal(next_change(o, ttl * 3).term, 0);
    int64_t took = dh_now_ms() - t0;
    printf("FIG elect_expiry_seen_ms=%lld ttl_ms=%lld\n", (long long)took, (long long)ttl);
    assert_true(took >= ttl / 2);

    /* The callback form heard the same changes, in term order, no term twice. */
    dh_sleep_ms(100 * dh_slack());
    pthread_mutex_lock(&h.mu);
    static const char *const values[] = {"", "a", "a2", "", "b", ""};
    assert_int_equal(h.n, 6);
    for (int i = 0; i < h.n; i++) {
        assert_string_equal(h.got[i].value, values[i]);
        assert_true((h.got[i].term == 0) == (values[i][0] == '\0'));
        for (int j = 0; j < i; j++)
            assert_true(h.got[i].term == 0 || h.got[j].term < h.got[i].term ||
                        (j == i - 1 && h.got[j].term == h.got[i].term));
    }
    pthread_mutex_unlock(&h.mu);
    dlock_observer_free(o);
    dlock_observer_free(cb);
    dlock_client_free(c);
    dlock_client_free(w);
}

/* An observer freed and another made at once on the same name: the second still hears
 * (the first's unsubscription must not end its subscription); a leader's dlock_extend
 * past its renewal keeps it the leader (its record's lease goes with the lock's). */
static void test_reobserve_and_extend(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *w = it_nodes_client();
    dlock_observer *o;
    assert_int_equal(dlock_observe(c, "re", NULL, NULL, &o), DLOCK_OK);
    assert_int_equal(next_change(o, 2000).term, 0);
    dlock_observer_free(o);
    assert_int_equal(dlock_observe(c, "re", NULL, NULL, &o), DLOCK_OK);
    assert_int_equal(next_change(o, 2000).term, 0);
    dlock_lock *l = elect(w, "re", "x", 0, 1500);
    assert_int_equal(next_change(o, 1000).term, dlock_fence(l));

    assert_int_equal(dlock_extend(l, 30000), DLOCK_OK);
    dh_sleep_ms(2000); /* past the first lease, before the next renewal (at 10 s) */
    dlock_leader_info info = leader_of(c, "re");
    assert_int_equal(info.term, dlock_fence(l));
    assert_true(info.remaining_ms > 20000);
    expect_quiet(o, 100); /* still the same leader to the observer */
    assert_int_equal(dlock_resign(l), DLOCK_OK);
    assert_int_equal(next_change(o, 1000).term, 0);
    dlock_observer_free(o);
    dlock_client_free(c);
    dlock_client_free(w);
}

/* A leader's lock ended by anyone's release with its token (dlock release, dlockd's
 * UNLOCK) or by an operator's break: its observers hear "no one leads" at once, not at
 * the end of its lease (10 s here), and dlock_leader agrees. */
static void test_release_and_break_tell_observers(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *w = it_nodes_client();
    dlock_observer *o;
    assert_int_equal(dlock_observe(c, "rb", NULL, NULL, &o), DLOCK_OK);
    assert_int_equal(next_change(o, 2000).term, 0);
    dlock_lock *l = elect(w, "rb", "x", 0, 10000);
    assert_int_equal(next_change(o, 1000).term, dlock_fence(l));
    dlock_lock *other;
    assert_int_equal(dlock_lock_adopt(c, "rb", dlock_token(l), &other), DLOCK_OK);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_release(other), DLOCK_OK);
    assert_int_equal(next_change(o, 1000).term, 0);
    printf("FIG elect_release_seen_ms=%lld ttl_ms=10000\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(leader_of(c, "rb").term, 0);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);

    l = elect(w, "rb", "y", 0, 10000);
    assert_int_equal(next_change(o, 1000).term, dlock_fence(l));
    dlock_break_info bi;
    t0 = dh_now_ms();
    assert_int_equal(dlock_break(c, "rb", NULL, &bi), DLOCK_OK);
    assert_int_equal(next_change(o, 1000).term, 0);
    printf("FIG elect_break_seen_ms=%lld ttl_ms=10000\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(dlock_check(l), DLOCK_ERR_LOST);
    dlock_release(l);
    dlock_observer_free(o);
    dlock_client_free(c);
    dlock_client_free(w);
}

/* dlock_elect_start: a campaign in steps waits behind a leader (DLOCK_ERR_AGAIN, nowait
 * steps never blocking), and once that leader resigns its last step, the blocking one
 * (DLOCK_ERR_WOULDBLOCK when nowait), makes it the leader with its value. */
static void test_elect_in_steps(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *d = it_nodes_client();
    dlock_lock *a = elect(c, "steps", "first", 0, 5000);
    dlock_elect_opts o;
    memset(&o, 0, sizeof o);
    o.lock.ttl_ms = 5000;
    o.lock.wait_ms = -1;
    o.value = "stepped";
    dlock_pending *p;
    assert_int_equal(dlock_elect_start(d, "steps", &o, &p), DLOCK_OK);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_AGAIN); /* behind a */
    uint64_t first = dlock_fence(a);
    assert_int_equal(dlock_resign(a), DLOCK_OK);
    int rc, steps = 0;
    int64_t until = dh_now_ms() + 3000 * dh_slack();
    while ((rc = dlock_pending_step_nowait(p, &l)) == DLOCK_ERR_AGAIN && dh_now_ms() < until) {
        struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
        poll(&pf, 1, (int)dlock_pending_due_ms(p));
        steps++;
    }
    assert_int_equal(rc, DLOCK_ERR_WOULDBLOCK); /* the announcement blocks */
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_OK);
    dlock_pending_free(p);
    assert_non_null(l);
    assert_true(dlock_fence(l) > first);
    dlock_leader_info info = leader_of(c, "steps");
    assert_int_equal(info.term, dlock_fence(l));
    assert_string_equal(info.value, "stepped");
    printf("FIG elect_nowait_steps=%d\n", steps);
    assert_int_equal(dlock_resign(l), DLOCK_OK);

    /* Given up while waiting: nothing is left on the servers. */
    a = elect(c, "steps", "again", 0, 5000);
    assert_int_equal(dlock_elect_start(d, "steps", &o, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_AGAIN);
    dlock_pending_free(p);
    assert_int_equal(dlock_resign(a), DLOCK_OK);
    assert_int_equal(leader_of(c, "steps").term, 0);
    dlock_client_free(c);
    dlock_client_free(d);
}

/* A candidate process: once a byte can be read from go, campaigns for name with the
 * lease TTL_MS until it leads, then leads until it is killed. Forked while this process
 * has no thread but the main one (ThreadSanitizer refuses threads in the child of a
 * process that had others). */
static pid_t candidate(const char *name, int go)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char byte;
    if (read(go, &byte, 1) != 1)
        _exit(3);
    dlock_client *c = it_nodes_client();
    char value[32];
    snprintf(value, sizeof value, "pid %ld", (long)getpid());
    dlock_elect_opts o;
    memset(&o, 0, sizeof o);
    o.lock.ttl_ms = TTL_MS;
    o.lock.wait_ms = -1;
    o.value = value;
    dlock_lock *l;
    if (dlock_elect(c, name, &o, &l) != DLOCK_OK)
        _exit(2);
    for (;;)
        pause();
}

/* The pid a leader's value names ("pid N"). */
static pid_t pid_of(const dlock_leader_info *info)
{
    long pid = 0;
    if (sscanf(info->value, "pid %ld", &pid) != 1)
        fail_msg("leader value \"%s\" names no pid", info->value);
    return (pid_t)pid;
}

/* The next leader an observer hears of (skipping "no one leads"), within ms. */
static dlock_leader_info next_leader(dlock_observer *o, int64_t ms, int *nones)
{
    int64_t until = dh_now_ms() + ms * dh_slack();
    for (;;) {
        int64_t left = until - dh_now_ms();
        if (left <= 0)
            fail_msg("no new leader within %lld ms", (long long)(ms * dh_slack()));
        dlock_leader_info info = next_change(o, (left + dh_slack() - 1) / dh_slack());
        if (info.term != 0)
            return info;
        ++*nones;
    }
}

static void test_failover_five(void **state)
{
    (void)state;
    enum { N = 5 };
    pid_t pids[N];
    int go[2];
    assert_int_equal(pipe(go), 0);
    for (int i = 0; i < N; i++)
        pids[i] = candidate("five", go[0]);
    dlock_client *c = it_nodes_client();
    dlock_observer *o;
    assert_int_equal(dlock_observe(c, "five", NULL, NULL, &o), DLOCK_OK);
    assert_int_equal(next_change(o, 2000).term, 0);
    assert_int_equal(write(go[1], "ggggg", N), N);
    close(go[0]);
    close(go[1]);
    int nones = 0, terms = 1;
    dlock_leader_info info = next_leader(o, 3000, &nones);
    for (int round = 0; round < 2; round++) {
        pid_t leader = pid_of(&info);
        bool ours = false;
        for (int i = 0; i < N; i++)
            ours |= pids[i] == leader;
        assert_true(ours);
        uint64_t term = info.term;
        int64_t t0 = dh_now_ms();
        kill(leader, SIGKILL);
        waitpid(leader, NULL, 0);
        info = next_leader(o, TTL_MS + 500, &nones);
        int64_t failover = dh_now_ms() - t0;
        terms++;
        printf("FIG elect_failover_ms=%lld ttl_ms=%d (library, SIGKILL)\n", (long long)failover,
               TTL_MS);
        assert_true(info.term > term);
        assert_true(pid_of(&info) != leader);
        /* The servers never show an older leader than one heard of (a newer one, or
         * none, only if this leader lost its lease already: on a loaded machine). */
        uint64_t read = leader_of(c, "five").term;
        if (read != info.term)
            printf("FIG elect_changed_before_read heard=%llu read=%llu\n",
                   (unsigned long long)info.term, (unsigned long long)read);
        assert_true(read == 0 || read >= info.term);
    }
    printf("FIG elect_terms_seen=%d no_leader_seen=%d\n", terms, nones);
    for (int i = 0; i < N; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    dlock_observer_free(o);
    dlock_client_free(c);
}

static void test_stopped_leader_fenced(void **state)
{
    (void)state;
    int term_pipe[2], go_pipe[2];
    assert_int_equal(pipe(term_pipe), 0);
    assert_int_equal(pipe(go_pipe), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dlock_client *c = it_nodes_client();
        dlock_lock *l = elect(c, "stopped", "old", 0, 600);
        uint64_t term = dlock_fence(l);
        if (dlock_fenced_set(c, "elect-resource", term, "old 1", 5) != DLOCK_OK ||
            write(term_pipe[1], &term, sizeof term) != (ssize_t)sizeof term)
            _exit(2);
        char go;
        if (read(go_pipe[0], &go, 1) != 1)
            _exit(3);
        /* Continued past its lease: it learns the loss, and its write is refused. */
        struct pollfd p = {.fd = dlock_lost_fd(l), .events = POLLIN};
        if (poll(&p, 1, (int)(2000 * dh_slack())) != 1)
            _exit(4);
        _exit(dlock_fenced_set(c, "elect-resource", term, "old 2", 5) == DLOCK_ERR_FENCED ? 0 : 5);
    }
    uint64_t old_term = 0;
    assert_int_equal(read(term_pipe[0], &old_term, sizeof old_term), (ssize_t)sizeof old_term);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    dlock_client *c = it_nodes_client();
    dlock_lock *l = elect(c, "stopped", "new", 3000, 600);
    assert_true(dlock_fence(l) > old_term);
    assert_int_equal(dlock_fenced_set(c, "elect-resource", dlock_fence(l), "new", 3), DLOCK_OK);
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(write(go_pipe[1], "g", 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    printf("FIG elect_fenced_writes_refused=1 old_term=%llu new_term=%llu\n",
           (unsigned long long)old_term, (unsigned long long)dlock_fence(l));
    assert_int_equal(dlock_resign(l), DLOCK_OK);
    dlock_client_free(c);
    for (int i = 0; i < 2; i++) {
        close(term_pipe[i]);
        close(go_pipe[i]);
    }
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_elect_basics),
        cmocka_unit_test(test_observer),
        cmocka_unit_test(test_reobserve_and_extend),
        cmocka_unit_test(test_elect_in_steps),
        cmocka_unit_test(test_release_and_break_tell_observers),
        cmocka_unit_test(test_failover_five),
        cmocka_unit_test(test_stopped_leader_fenced),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_elect_basics),
        cmocka_unit_test(test_observer),
        cmocka_unit_test(test_elect_in_steps),
        cmocka_unit_test(test_release_and_break_tell_observers),
        cmocka_unit_test(test_failover_five),
    };
    return IT_NODES_GROUPS("elect", one, three);
}
