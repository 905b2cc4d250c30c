/*
 * test_elect_cli.c: `dlock elect` and `dlock leader` with real dlock processes against
 * real redis-server processes.
 *
 * Checked exactly:
 *   - once: `dlock leader` of a name no one leads (exit 73, "no one leads" on stderr,
 *     nothing on stdout); an elected CMD sees DLOCK_TERM == DLOCK_FENCE > 0 and, run
 *     from CMD, `dlock leader --json` shows its value, that term, a "host:pid" holder
 *     and a lease left; the leader resigns when CMD ends; CMD's status passes through;
 *     a second candidate with -w 0 finds the name led (75); the usage errors (64);
 *   - five candidates with a 1 s lease and a `dlock leader --watch`: the leader is
 *     SIGKILLed twice, and each time another candidate leads with a larger term within
 *     the lease plus 700 ms (times the slack; FIG elect_cli_failover_ms); the watcher
 *     printed the state at its start (no leader), then every leader in strictly
 *     increasing term order with its value, then "no leader" once all had quit, and
 *     exits 0 on SIGTERM;
 *   - a leader whose server stops answering (SIGSTOP) has its CMD dead within the 2 s
 *     lease from the pause (not scaled: it is the promise, not a liveness bound; FIG
 *     elect_cli_cmd_killed_ms), exits 73 saying why, and a new candidate leads with a
 *     larger term once the server is back.
 *
 * The dlock processes run in their own process groups, so that only the one a test
 * aims at gets its signal; a test's teardown kills and reaps whatever it left running.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARGS_MAX  24
#define PROCS_MAX 16

static dh_server srv;    /* the first two tests' server */
static dh_server own;    /* the pause test's: stopping it must disturb no other test */
static bool own_paused;  /* own is SIGSTOPped: the teardown resumes it first */
static char tmpdir[512]; /* CMD's files, dlock's output */

/* Every dlock a test spawned and has not reaped yet: the teardown's to kill. */
static pid_t procs[PROCS_MAX];

static int group_setup(void **state)
{
    (void)state;
    if (it_tmpdir(tmpdir, sizeof tmpdir, "test_elect_cli") != 0)
        return -1;
    return dh_server_start(&srv, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    dh_server_stop(&srv);
    it_tmpdir_remove(tmpdir);
    return 0;
}

/* After each test, passed or failed: no dlock of it outlives it, nor its server. */
static int test_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < PROCS_MAX; i++) {
        if (procs[i] > 0)
            dh_reap(procs[i], 0, NULL);
        procs[i] = 0;
    }
    if (own_paused)
        dh_server_resume(&own);
    own_paused = false;
    dh_server_stop(&own);
    return 0;
}

/* ---- files --------------------------------------------------------------------- */

/* tmpdir/name (it_path). */
static const char *path(const char *name)
{
    return it_path(tmpdir, name);
}

/* The last line of text (without its newline) into out; "" when there is none. */
static void last_line(const char *text, char *out, size_t len)
{
    size_t n = strlen(text);
    if (n > 0 && text[n - 1] == '\n')
        n--;
    size_t start = n;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    snprintf(out, len, "%.*s", (int)(n - start), text + start);
}

/* Wait until file's last line is want (timeout times the slack). */
static void wait_last_line(const char *file, const char *want, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    for (;;) {
        char *text = it_slurp(file), last[512];
        last_line(text, last, sizeof last);
        bool done = strcmp(last, want) == 0;
        if (!done && dh_now_ms() > deadline)
            fail_msg("%s does not end with \"%s\" after %lld ms:\n%s", file, want,
                     (long long)timeout_ms, text);
        free(text);
        if (done)
            return;
        dh_sleep_ms(10);
    }
}

/* ---- the dlock command ----------------------------------------------------------- */

/* The environment of a dlock that talks to s alone, with $DLOCK the built command (for
 * a CMD that runs dlock itself). Static storage, rewritten by each call. */
static const char *const *cli_env(const dh_server *s)
{
    static char servers[160], cli[600];
    static const char *env[4];
    snprintf(servers, sizeof servers, "DLOCK_SERVERS=%s", s->url);
    snprintf(cli, sizeof cli, "DLOCK=%s", dh_cli_path());
    env[0] = servers;
    env[1] = "DLOCK_PASSWORD";
    env[2] = cli;
    env[3] = NULL;
    return env;
}

/* Run dlock on srv with the arguments that follow (NULL-terminated) to its end. */
static void run_sync(it_run *r, ...)
{
    va_list ap;
    va_start(ap, r);
    it_cli_va(r, cli_env(&srv), NULL, ap);
    va_end(ap);
}
#define DLOCK(r, ...) run_sync((r), __VA_ARGS__, (const char *)NULL)

/* Exit want, nothing on stdout, and one line "dlock: ..." with needle on stderr. */
static void expect_line(const it_run *r, int want, const char *needle)
{
    const char *nl = strchr(r->err, '\n');
    if (r->status != want || r->out[0] != '\0' || strncmp(r->err, "dlock: ", 7) != 0 ||
        nl == NULL || nl[1] != '\0' || strstr(r->err, needle) == NULL)
        fail_msg("want exit %d and one line with \"%s\" on stderr only; exit %d\nstdout: %s\n"
                 "stderr: %s",
                 want, needle, r->status, r->out, r->err);
}

/* dlock on s in the background, in a process group of its own, its stdout and
 * stderr into tmpdir/TAG.out and tmpdir/TAG.err; recorded for the teardown. */
static pid_t spawn(const dh_server *s, const char *tag, ...)
{
    const char *argv[ARGS_MAX + 2];
    int n = 0;
    argv[n++] = dh_cli_path();
    va_list ap;
    va_start(ap, tag);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(n <= ARGS_MAX);
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    char out[600], err[600];
    snprintf(out, sizeof out, "%s.out", path(tag));
    snprintf(err, sizeof err, "%s.err", path(tag));
    int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int efd = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(ofd >= 0 && efd >= 0);
    dh_spawn_opts o = {.out_fd = ofd, .err_fd = efd, .own_group = true, .env = cli_env(s)};
    pid_t pid = dh_spawn(argv, &o);
    close(ofd);
    close(efd);
    assert_true(pid > 0);
    int i = 0;
    while (i < PROCS_MAX && procs[i] != 0)
        i++;
    assert_true(i < PROCS_MAX);
    procs[i] = pid;
    return pid;
}

/* Wait up to timeout_ms (times the slack) for a spawned dlock to exit, and return
 * its status as a shell shows it; fail showing its output (tag's files) if it does not
 * exit, or exits otherwise than want. */
static int reap(pid_t pid, const char *tag, int64_t timeout_ms, int want)
{
    int st = 0;
    bool in_time = dh_reap(pid, timeout_ms * dh_slack(), &st);
    for (int i = 0; i < PROCS_MAX; i++)
        if (procs[i] == pid)
            procs[i] = 0;
    int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (!in_time || status != want) {
        char out[600], err[600];
        snprintf(out, sizeof out, "%s.out", path(tag));
        snprintf(err, sizeof err, "%s.err", path(tag));
        char *o = it_slurp(out), *e = it_slurp(err);
        fail_msg("dlock %s: %s %d, want %d\nstdout: %s\nstderr: %s", tag,
                 in_time ? "exit" : "killed after its time, status", status, want, o, e);
    }
    return status;
}

/* SIGTERM a spawned dlock, and reap it as reap does, within 5 s. */
static void stop(pid_t pid, const char *tag, int want)
{
    assert_int_equal(kill(pid, SIGTERM), 0);
    reap(pid, tag, 5000, want);
}

/* A CMD that records its pid in tmpdir/TAG.pid, then sleeps: the test sees it start. */
static const char *sleeper(const char *tag, char *buf, size_t len)
{
    char name[64];
    snprintf(name, sizeof name, "%s.pid", tag);
    snprintf(buf, len, "echo $$ > %s; exec sleep 600", path(name));
    return buf;
}

/* The pid a sleeper CMD of TAG recorded once it runs, within 5 s (times the slack): a
 * candidate the servers name as the leader runs its CMD a moment later, and a SIGTERM
 * before that is a campaign given up (exit 75), not a CMD ended. */
static pid_t cmd_started(const char *tag)
{
    char name[64];
    snprintf(name, sizeof name, "%s.pid", tag);
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    char *text;
    while ((text = it_slurp(path(name)))[0] == '\0' || strchr(text, '\n') == NULL) {
        free(text);
        if (dh_now_ms() >= deadline)
            fail_msg("%s's CMD did not start within 5 s", tag);
        dh_sleep_ms(5);
    }
    pid_t pid = (pid_t)strtol(text, NULL, 10);
    free(text);
    assert_true(pid > 1);
    return pid;
}

/* ---- the leader from outside ------------------------------------------------------ */

static void leader_now(dlock_client *c, const char *name, dlock_leader_info *info)
{
    int rc = dlock_leader(c, name, info);
    if (rc != DLOCK_OK)
        fail_msg("dlock_leader %s: %s (%s)", name, dlock_strerror(rc), dlock_errmsg());
}

/* Name is led in term (0: no one leads it), by a candidate whose value is want (NULL:
 * any). */
static void expect_leader(dlock_client *c, const char *name, uint64_t term, const char *want)
{
    dlock_leader_info now;
    leader_now(c, name, &now);
    assert_int_equal(now.term, term);
    if (want != NULL)
        assert_string_equal(now.value, want);
}

/* Wait (polling every 20 ms, timeout times the slack) until name is led with a term
 * larger than after, by a candidate whose value is want (NULL: any) and not unwanted
 * (NULL: none); into *info. Returns how long it took. */
static int64_t wait_leader(dlock_client *c, const char *name, uint64_t after, const char *want,
                           const char *unwanted, int64_t timeout_ms, dlock_leader_info *info)
{
    int64_t t0 = dh_now_ms(), deadline = t0 + timeout_ms * dh_slack();
    for (;;) {
        leader_now(c, name, info);
        if (info->term > after && (want == NULL || strcmp(info->value, want) == 0) &&
            (unwanted == NULL || strcmp(info->value, unwanted) != 0))
            return dh_now_ms() - t0;
        if (dh_now_ms() > deadline)
            fail_msg("%s: no new leader within %lld ms (term %" PRIu64 ", value \"%s\")", name,
                     (long long)timeout_ms, info->term, info->value);
        dh_sleep_ms(20);
    }
}

/* A process (not our child: CMD is dlock's) is gone: no such process, or a zombie
 * that its parent has not reaped yet (dead all the same; kill(pid, 0) still succeeds
 * on one). */
static bool gone(pid_t pid)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%d/stat", (int)pid);
    char *st = it_slurp(proc);
    const char *rp = strrchr(st, ')');
    bool alive = rp != NULL && rp[1] == ' ' && rp[2] != 'Z';
    free(st);
    return !alive;
}

/* ---- once ---------------------------------------------------------------------- */

static void test_elect_once(void **state)
{
    (void)state;
    it_run r;
    DLOCK(&r, "leader", "x");
    expect_line(&r, 73, "no one leads");

    /* CMD sees its term, and dlock leader (run by CMD, so while it leads) shows it. */
    DLOCK(&r, "elect", "--value", "v 1", "x", "--", "sh", "-c",
          "echo \"$DLOCK_TERM $DLOCK_FENCE\"; \"$DLOCK\" leader --json x");
    it_expect_status(&r, 0);
    assert_string_equal(r.err, "");
    char *end;
    unsigned long long term = strtoull(r.out, &end, 10);
    assert_true(term > 0 && *end == ' ');
    assert_int_equal(strtoull(end + 1, &end, 10), term); /* DLOCK_FENCE == DLOCK_TERM */
    assert_int_equal(*end, '\n');
    const char *json = end + 1;
    static const char head[] = "{\"value\":\"v 1\",\"holder\":\"";
    if (strncmp(json, head, strlen(head)) != 0)
        fail_msg("dlock leader --json printed: %s", json);
    /* The holder, "host:pid" (no label): pid digits after the last colon. */
    char holder[512];
    size_t hl = strcspn(json + strlen(head), "\"");
    assert_true(hl > 0 && hl < sizeof holder);
    memcpy(holder, json + strlen(head), hl);
    holder[hl] = '\0';
    const char *colon = strrchr(holder, ':');
    assert_true(colon != NULL && colon > holder && colon[1] != '\0' &&
                strspn(colon + 1, "0123456789") == strlen(colon + 1));
    const char *rem = strstr(json, ",\"remaining_ms\":");
    assert_non_null(rem);
    long long remaining = strtoll(rem + strlen(",\"remaining_ms\":"), NULL, 10);
    assert_true(remaining > 0 && remaining <= 30000); /* the default lease, 30 s */
    char want[1024];
    snprintf(want, sizeof want,
             "%llu %llu\n{\"value\":\"v 1\",\"holder\":\"%s\",\"term\":%llu,\"remaining_ms\":%lld}"
             "\n",
             term, term, holder, term, remaining);
    assert_string_equal(r.out, want);
    /* CMD ended: dlock resigned (no lease left to run out). */
    DLOCK(&r, "leader", "x");
    expect_line(&r, 73, "no one leads");

    /* Usage errors, each before anything reaches the server. */
    DLOCK(&r, "elect", "--once-per", "1d", "x", "--", "true");
    expect_line(&r, 64, "--once-per");
    DLOCK(&r, "elect", "--min-hold", "1s", "x", "--", "true");
    expect_line(&r, 64, "--min-hold");
    DLOCK(&r, "run", "--value", "v", "x", "--", "true");
    expect_line(&r, 64, "--value");
    DLOCK(&r, "leader", "--value", "v", "x");
    expect_line(&r, 64, "--value");
    DLOCK(&r, "elect", "x");
    expect_line(&r, 64, "(dlock elect NAME -- CMD)");
    DLOCK(&r, "leader", "x");
    expect_line(&r, 73, "no one leads");

    /* CMD's status is dlock's, and the leader resigned after it too. */
    DLOCK(&r, "elect", "y", "--", "sh", "-c", "exit 7");
    it_expect_status(&r, 7);
    assert_string_equal(r.err, "");
    DLOCK(&r, "leader", "y");
    expect_line(&r, 73, "no one leads");

    /* A second candidate that tries once finds z led, and never runs its CMD. */
    dlock_client *c = it_client(&srv, it_timeout_ms());
    char script[1024];
    pid_t lead = spawn(&srv, "z", "elect", "--value", "first", "z", "--", "sh", "-c",
                       sleeper("z", script, sizeof script), (const char *)NULL);
    dlock_leader_info info;
    wait_leader(c, "z", 0, "first", NULL, 5000, &info);
    DLOCK(&r, "elect", "-w", "0", "z", "--", "touch", path("z.ran"));
    expect_line(&r, 75, "dlock: elect z: another candidate leads (");
    assert_int_equal(access(path("z.ran"), F_OK), -1);
    expect_leader(c, "z", info.term, "first");
    /* SIGTERM goes on to CMD (sleep dies of it), and the leader resigns. */
    cmd_started("z");
    stop(lead, "z", 128 + SIGTERM);
    expect_leader(c, "z", 0, NULL);
    dlock_client_free(c);
}

/* ---- five candidates ------------------------------------------------------------ */

#define FIVE 5

/* One line of the watcher's output: a leader's term and value, or term 0 for "five:
 * no leader"; fails on anything else. */
static uint64_t watch_line(const char *line, char *value, size_t len)
{
    value[0] = '\0';
    if (strcmp(line, "five: no leader") == 0)
        return 0;
    char *end;
    static const char head[] = "five: term ";
    if (strncmp(line, head, strlen(head)) != 0)
        fail_msg("watcher line: %s", line);
    uint64_t term = strtoull(line + strlen(head), &end, 10);
    const char *by = ", led by ";
    const char *left = strstr(end, " left): ");
    if (term == 0 || strncmp(end, by, strlen(by)) != 0 || left == NULL)
        fail_msg("watcher line: %s", line);
    snprintf(value, len, "%s", left + strlen(" left): "));
    return term;
}

static void test_elect_five(void **state)
{
    (void)state;
    /* The watcher first, so that its first line is the state at its start. */
    pid_t watcher = spawn(&srv, "watch", "leader", "--watch", "five", (const char *)NULL);
    wait_last_line(path("watch.out"), "five: no leader", 5000);

    pid_t cand[FIVE];
    char tag[FIVE][8], val[FIVE][8];
    for (int k = 0; k < FIVE; k++) {
        snprintf(tag[k], sizeof tag[k], "five%d", k);
        snprintf(val[k], sizeof val[k], "c%d", k);
        char script[1024];
        cand[k] = spawn(&srv, tag[k], "elect", "-t", "1s", "--value", val[k], "five", "--", "sh",
                        "-c", sleeper(tag[k], script, sizeof script), (const char *)NULL);
    }
    dlock_client *c = it_client(&srv, it_timeout_ms());
    dlock_leader_info info;
    wait_leader(c, "five", 0, NULL, NULL, 5000, &info);
    /* The leaders seen, in order, each with its value. */
    uint64_t seen_term[3] = {info.term};
    char seen_value[3][DLOCK_LEADER_VALUE_MAX + 1];
    snprintf(seen_value[0], sizeof seen_value[0], "%s", info.value);

    for (int round = 1; round <= 2; round++) {
        int k = -1;
        for (int i = 0; i < FIVE; i++)
            if (cand[i] > 0 && strcmp(info.value, val[i]) == 0)
                k = i;
        if (k < 0)
            fail_msg("the leader's value \"%s\" is no live candidate's", info.value);
        /* Dead, not resigned: the next leader waits out the lease. */
        assert_int_equal(kill(cand[k], SIGKILL), 0);
        int64_t t0 = dh_now_ms();
        reap(cand[k], tag[k], 1000, 128 + SIGKILL);
        cand[k] = 0;
        uint64_t old = info.term;
        wait_leader(c, "five", old, NULL, val[k], 5000, &info);
        int64_t ms = dh_now_ms() - t0;
        printf("FIG elect_cli_failover_ms=%lld ttl_ms=1000\n", (long long)ms);
        if (ms > (1000 + 700) * dh_slack())
            fail_msg("round %d: a new leader after %lld ms", round, (long long)ms);
        seen_term[round] = info.term;
        snprintf(seen_value[round], sizeof seen_value[round], "%s", info.value);
    }

    /* The rest quit: the waiting ones give up on SIGTERM (75), then the leader's CMD
     * dies of it (143) and it resigns, which the watcher hears as "no leader". */
    for (int k = 0; k < FIVE; k++) {
        if (cand[k] > 0 && strcmp(val[k], info.value) != 0) {
            stop(cand[k], tag[k], 75);
            cand[k] = 0;
        }
    }
    for (int k = 0; k < FIVE; k++) {
        if (cand[k] > 0) {
            cmd_started(tag[k]);
            stop(cand[k], tag[k], 128 + SIGTERM);
        }
    }
    expect_leader(c, "five", 0, NULL);
    dlock_client_free(c);
    wait_last_line(path("watch.out"), "five: no leader", 3000);
    stop(watcher, "watch", 0);
    char *err = it_slurp(path("watch.err"));
    assert_string_equal(err, "");
    free(err);

    /* No leader at the start and at the end; leaders in strictly increasing term
     * order, each shown once, among them the three seen (with their values). */
    char *text = it_slurp(path("watch.out"));
    int leaders = 0, found = 0, lines = 0;
    uint64_t last_term = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char value[DLOCK_LEADER_VALUE_MAX + 1];
        uint64_t term = watch_line(line, value, sizeof value);
        if (lines++ == 0 && term != 0)
            fail_msg("the watcher's first line is not the state at its start: %s", line);
        if (term == 0)
            continue;
        if (term <= last_term)
            fail_msg("term %" PRIu64 " after term %" PRIu64, term, last_term);
        last_term = term;
        leaders++;
        for (int i = 0; i < 3; i++) {
            if (seen_term[i] == term) {
                assert_string_equal(value, seen_value[i]);
                found++;
            }
        }
    }
    free(text);
    assert_true(leaders >= 3);
    assert_int_equal(found, 3);
}

/* ---- the server stops answering ------------------------------------------------------ */

static void test_elect_server_paused(void **state)
{
    (void)state;
    assert_int_equal(dh_server_start(&own, NULL), 0);
    dlock_client *c = it_client(&own, it_timeout_ms());
    char script[1024];
    pid_t a = spawn(&own, "a", "elect", "-t", "2s", "--value", "a", "p", "--", "sh", "-c",
                    sleeper("a", script, sizeof script), (const char *)NULL);
    dlock_leader_info info;
    wait_leader(c, "p", 0, "a", NULL, 5000, &info);
    uint64_t a_term = info.term;
    pid_t cmd = cmd_started("a");
    assert_true(!gone(cmd));
    /* CMD's death is seen through a pidfd, at once; where pidfd_open is missing
     * (valgrind 3.19 does not know it), by /proc every 2 ms. */
    int pidfd = (int)syscall(SYS_pidfd_open, cmd, 0);
    assert_true(pidfd >= 0 || errno == ENOSYS);

    /* No renewal can be confirmed from now on: A must kill CMD before the lease it
     * last renewed (before the pause) could end, whatever happens to the server. */
    dh_server_pause(&own);
    own_paused = true;
    int64_t paused = dh_now_ms();
    if (pidfd >= 0) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        int n = poll(&p, 1, (int)(5000 * dh_slack()));
        close(pidfd);
        assert_int_equal(n, 1);
    } else {
        while (!gone(cmd) && dh_now_ms() < paused + 5000 * dh_slack())
            dh_sleep_ms(2);
    }
    int64_t killed = dh_now_ms() - paused;
    if (!gone(cmd))
        fail_msg("CMD still runs %lld ms after the server stopped answering", (long long)killed);
    printf("FIG elect_cli_cmd_killed_ms=%lld lease_ms=2000\n", (long long)killed);
    if (killed >= 2000)
        fail_msg("CMD died %lld ms after the pause, past its 2 s lease", (long long)killed);

    /* Past the lease (and then some) before the server answers again: A's key has
     * run out by then, so another candidate can be elected. */
    while (dh_now_ms() < paused + 2200 * dh_slack())
        dh_sleep_ms(10);
    dh_server_resume(&own);
    own_paused = false;
    pid_t b = spawn(&own, "b", "elect", "-t", "2s", "--value", "b", "p", "--", "sh", "-c",
                    sleeper("b", script, sizeof script), (const char *)NULL);
    wait_leader(c, "p", a_term, "b", NULL, 5000, &info);

    reap(a, "a", 5000, 73);
    char *out = it_slurp(path("a.out")), *err = it_slurp(path("a.err"));
    assert_string_equal(out, "");
    it_run said = {.status = 73};
    snprintf(said.err, sizeof said.err, "%s", err);
    expect_line(&said, 73, "elect p: no renewal confirmed in time");
    free(out);
    free(err);

    /* B still leads, undisturbed by A's end. */
    expect_leader(c, "p", info.term, "b");
    cmd_started("b");
    stop(b, "b", 128 + SIGTERM);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_elect_once, test_teardown),
        cmocka_unit_test_teardown(test_elect_five, test_teardown),
        cmocka_unit_test_teardown(test_elect_server_paused, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
