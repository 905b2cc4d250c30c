/*
 * test_schedule.c: `dlock run` for a fleet's cron job (-E, -v, --once-per, --min-hold)
 * with real dlock processes against real redis-server processes and a file:// directory.
 *
 * The fleet: three "hosts" (forked children) each fire `dlock run --once-per 2s -E 0
 * NAME -- CMD` about once a second, with 0-300 ms of jitter, for three whole slots;
 * CMD appends "$DLOCK_SLOT hN NOW_MS" to a shared file (O_APPEND, one write). Checked
 * exactly: one line per slot (each whole slot of the window present, none twice, each
 * a multiple of 2 s, in increasing order), each run's slot on the servers' clock (the
 * time CMD ran, less the host's skew, lies in its slot), every dlock exit status (0 with
 * -E 0, or CMD's own where CMD ran and failed), nothing printed, the lock free at the
 * end and the servers' record holding the last slot. Five jobs, each its own name, run
 * so: on one server; with CMD exiting 1 or SIGKILLed in alternate slots (a run that
 * started counts: the slot is not run again); over three servers (Redlock); over
 * file://; with the hosts under libfaketime at +30 s, -20 s and +1.9 s (their slots
 * stay the servers'). They run at once so that the file costs one window (about 8 s), not
 * five: CI time is scarce, and the jobs share nothing but the machine.
 *
 * Then --min-hold (dlock exits with CMD's status at once, the lock stays as a plain
 * lease until the hold ends and is then free), -E and -v on a busy lock and on a slot
 * that already ran, and the usage errors.
 *
 * Slot boundaries: a host firing at 1.999 s and one at 2.001 s run in different slots,
 * which is right, so lines are counted per slot value; the fleet's ticks start 100 ms
 * before a boundary so that some land on each side of it. Other timings are orderings,
 * bounds times DLOCK_TEST_SLACK, or FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_MS 2000 /* --once-per 2s */
#define HOSTS     3
#define TICKS     6 /* one a second: three whole slots */
#define JOBS      5

static dh_server srv;   /* one server */
static dh_server rl[3]; /* three, for Redlock */
static char rl_urls[3 * 140];
static char tmpdir[512];   /* CMD's files */
static char file_url[600]; /* file://tmpdir/locks */

static int group_setup(void **state)
{
    (void)state;
    char locks[560];
    if (it_tmpdir(tmpdir, sizeof tmpdir, "test_schedule") != 0)
        return -1;
    snprintf(locks, sizeof locks, "%s/locks", tmpdir);
    snprintf(file_url, sizeof file_url, "file://%s", locks);
    if (mkdir(locks, 0700) != 0 || dh_server_start(&srv, NULL) != 0 ||
        dh_servers_start(rl, 3, NULL) != 0)
        return -1;
    dh_server_urls(rl, 3, rl_urls, sizeof rl_urls);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    dh_server_stop(&srv);
    dh_servers_stop(rl, 3);
    it_tmpdir_remove(tmpdir);
    return 0;
}

/* ---- clocks, files, the dlock command ------------------------------------------- */
static int64_t realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The clock slots are counted on: s's TIME in ms, or this host's wall clock (NULL: the
 * file:// jobs). */
static int64_t server_ms(dh_server *s)
{
    if (s == NULL)
        return realtime_ms();
    redisReply *r = dh_cmd(s, "TIME");
    assert_non_null(r);
    assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    int64_t ms =
        strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

/* tmpdir/name (it_path). */
static const char *path(const char *name)
{
    return it_path(tmpdir, name);
}

/* dlock -s servers ARGS... (NULL-terminated), DLOCK_SERVERS and DLOCK_PASSWORD removed
 * from its environment. */
static it_run *dlock_on(it_run *o, const char *servers, ...)
{
    const char *const pre[] = {"-s", servers, NULL};
    static const char *const env[] = {"DLOCK_SERVERS", "DLOCK_PASSWORD", NULL};
    va_list ap;
    va_start(ap, servers);
    it_cli_va(o, env, pre, ap);
    va_end(ap);
    return o;
}
#define DLOCK(o, ...) dlock_on((o), srv.url, __VA_ARGS__, (const char *)NULL)

/* Exit `want`, nothing on stdout, and one line on stderr, "dlock: ..." with needle. */
static void expect_line(const it_run *o, int want, const char *needle)
{
    const char *nl = strchr(o->err, '\n');
    if (o->status != want || o->out[0] != '\0' || strncmp(o->err, "dlock: ", 7) != 0 ||
        nl == NULL || nl[1] != '\0' || strstr(o->err, needle) == NULL)
        fail_msg("want exit %d and one line with \"%s\" on stderr only; exit %d\nstdout: %s\n"
                 "stderr: %s",
                 want, needle, o->status, o->out, o->err);
}

/* Exit `want` and nothing printed at all (what -E promises cron). */
static void expect_silent(const it_run *o, int want)
{
    if (o->status != want || o->out[0] != '\0' || o->err[0] != '\0')
        fail_msg("want exit %d, silent; exit %d\nstdout: %s\nstderr: %s", want, o->status, o->out,
                 o->err);
}

static long long key_exists(dh_server *s, const char *name, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}%s", name, suffix);
    return it_exists(s, key);
}

/* "YYYY-MM-DDTHH:MM:SSZ" of unix seconds, as dlock -v writes a slot. */
static void utc(long long secs, char out[32])
{
    time_t t = (time_t)secs;
    struct tm tm;
    assert_non_null(gmtime_r(&t, &tm));
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* libfaketime, as tests/support/server.c finds it ($DLOCK_LIBFAKETIME, else Debian's
 * multiarch path), as "LD_PRELOAD=...". Missing, the test fails: the skew is its point.
 * (No glibc malloc ahead of it: that is for redis-server's jemalloc, which dlock lacks.) */
static void faketime_preload(char *out, size_t n)
{
    const char *lib = getenv("DLOCK_LIBFAKETIME");
    glob_t g;
    if (lib != NULL && lib[0] != '\0') {
        snprintf(out, n, "LD_PRELOAD=%s", lib);
    } else if (glob("/usr/lib/*/faketime/libfaketime.so.1", 0, NULL, &g) == 0) {
        snprintf(out, n, "LD_PRELOAD=%s", g.gl_pathv[0]);
        globfree(&g);
    } else {
        fail_msg("libfaketime not found (or $DLOCK_LIBFAKETIME): apt-get install libfaketime");
    }
    if (access(out + strlen("LD_PRELOAD="), R_OK) != 0)
        fail_msg("%s: not readable", out);
}

/* ---- the fleet ----------------------------------------------------------------- */
/* A job that three hosts run on one schedule. */
typedef struct job {
    const char *label, *name, *servers;
    dh_server *srv; /* where the record and TIME are read (n of them); NULL: file:// */
    int n;
    bool fail_kill;           /* CMD exits 1 in even slots, is SIGKILLed in odd ones */
    const char *clock[HOSTS]; /* each host's FAKETIME; NULL: the machine's clock */
    int64_t skew_ms[HOSTS];   /* what that clock adds */
    char file[600];           /* CMD's lines */
} job;

/* What one host saw, in memory shared with the test process. */
typedef struct host_log {
    int ticks;
    int status[TICKS];     /* each dlock's exit status */
    char said[TICKS][160]; /* what it printed, stdout then stderr */
} host_log;

/* After writing its line, CMD fails: exit 1 in slots 0, 4, 8... (DLOCK_SLOT/2 even),
 * SIGKILLed in the others. */
#define FATE "; if [ $((DLOCK_SLOT / 2 % 2)) -eq 0 ]; then exit 1; fi; kill -9 $$"

/* A host's life, in a forked child: TICKS runs, tick k at t0 - 100 ms + k s plus
 * jitter on the machine's clock, whatever the host's skew: when a skewed host fires is
 * not the question, which slot it gets is. */
static void host(const job *j, int h, int64_t t0, const char *preload, host_log *log, unsigned seed)
{
    char script[1024], clock[64];
    snprintf(script, sizeof script, "echo \"$DLOCK_SLOT h%d $(date +%%s%%3N)\" >> '%s'%s", h + 1,
             j->file, j->fail_kill ? FATE : "");
    const char *argv[] = {dh_cli_path(), "-s", j->servers, "run", "--once-per", "2s", "-w",   "1s",
                          "-E",          "0",  j->name,    "--",  "sh",         "-c", script, NULL};
    /* A skewed host's wall clock only: its monotonic clock is as good as anyone's. */
    /* Under libfaketime, a sanitizer build of dlock needs telling. ASan wants its
     * runtime first among the preloaded libraries and refuses to start after libfaketime
     * unless told the order is wanted. TSan loses track of a mutex that a condition
     * wait released, since libfaketime's pthread_cond_* (bound by symbol version) call
     * glibc's past TSan's interceptors, and reports a double lock that is none: its
     * reports are off for these hosts only (the other jobs run the same code under it). */
    char asan[512], tsan[512];
    const char *a = getenv("ASAN_OPTIONS"), *t = getenv("TSAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0", a ? a : "",
             a && a[0] ? ":" : "");
    snprintf(tsan, sizeof tsan, "TSAN_OPTIONS=%s%sreport_bugs=0", t ? t : "", t && t[0] ? ":" : "");
    const char *env[] = {"DLOCK_SERVERS",
                         "DLOCK_PASSWORD",
                         preload,
                         clock,
                         asan,
                         tsan,
                         "FAKETIME_DONT_FAKE_MONOTONIC=1",
                         "FAKETIME_DONT_RESET=1",
                         NULL};
    if (j->clock[h] != NULL)
        snprintf(clock, sizeof clock, "FAKETIME=%s", j->clock[h]);
    else
        env[2] = NULL;
    for (int k = 0; k < TICKS; k++) {
        int64_t at = t0 - 100 + k * 1000 + rand_r(&seed) % 301;
        for (int64_t now; (now = realtime_ms()) < at;)
            dh_sleep_ms(at - now);
        char out[80], err[80];
        log->status[k] = dh_run(argv, env, out, sizeof out, err, sizeof err);
        snprintf(log->said[k], sizeof log->said[k], "%s%s", out, err);
        log->ticks = k + 1;
    }
}

/* The checks of one job once its hosts are gone (see the header). t0: the first whole
 * slot; begin and end: the job's clock read before the first tick and after the last
 * run. */
static void check_job(const job *j, const host_log *logs, int64_t t0, int64_t begin, int64_t end)
{
    /* Every dlock exited 0 and silent (-E 0), or with what CMD's fate made it: first,
     * since a dlock that could not start leaves no line, and says why here. */
    int failed[HOSTS] = {0}, killed[HOSTS] = {0};
    for (int h = 0; h < HOSTS; h++) {
        const host_log *lg = &logs[h];
        assert_int_equal(lg->ticks, TICKS);
        for (int k = 0; k < TICKS; k++) {
            int st = lg->status[k];
            failed[h] += st == 1;
            killed[h] += st == 128 + 9;
            if ((st != 0 && !(j->fail_kill && (st == 1 || st == 128 + 9))) ||
                (st == 0 && lg->said[k][0] != '\0'))
                fail_msg("%s: h%d tick %d: exit %d: %s", j->label, h + 1, k, st, lg->said[k]);
        }
    }
    char *text = it_slurp(j->file);
    long long prev = -1;
    int lines = 0, fates[HOSTS][2] = {{0}};
    bool whole[3] = {false, false, false};
    for (char *line = text, *nl; *line != '\0'; line = nl + 1) {
        long long slot = 0, now = 0;
        int h = 0, len = -1;
        nl = strchr(line, '\n');
        if (nl == NULL || sscanf(line, "%lld h%d %lld%n", &slot, &h, &now, &len) != 3 ||
            line + len != nl || h < 1 || h > HOSTS)
            fail_msg("%s: not a \"SLOT hN MS\" line: %s", j->label, line);
        long long ms = slot * 1000, real = now - j->skew_ms[h - 1];
        if (ms % PERIOD_MS != 0 || slot <= prev)
            fail_msg("%s: slot %lld not a multiple of 2 s, or not after %lld:\n%s", j->label, slot,
                     prev, text);
        /* Within the servers' time around the fleet, and CMD's own time on their clock
         * (its host's, less the skew) in the slot it got: not before it (the slot was
         * read from the servers before CMD started), and within the slot, or just past
         * it by the time CMD takes to start. A host's own slot would be 10 or 15 slots
         * off, or (at +1.9 s, runs falling early in their slots) start after CMD's time. */
        if (ms < begin - begin % PERIOD_MS || ms > end)
            fail_msg("%s: slot %lld outside the servers' time %lld..%lld ms", j->label, slot,
                     (long long)begin, (long long)end);
        if (real < ms || real >= ms + PERIOD_MS + 1000 * dh_slack())
            fail_msg("%s: h%d ran slot %lld at %lld ms (%lld on its clock): not the servers' slot",
                     j->label, h, slot, real, now);
        for (int w = 0; w < 3; w++)
            whole[w] |= ms == t0 + w * PERIOD_MS;
        fates[h - 1][slot / 2 % 2]++;
        prev = slot;
        lines++;
    }
    for (int w = 0; w < 3; w++)
        if (!whole[w])
            fail_msg("%s: the whole slot %lld has no run:\n%s", j->label,
                     (long long)(t0 / 1000 + w * PERIOD_MS / 1000), text);
    for (int h = 0; j->fail_kill && h < HOSTS; h++)
        if (failed[h] != fates[h][0] || killed[h] != fates[h][1])
            fail_msg("%s: h%d exited 1 %d times and 137 %d times, but ran %d + %d slots", j->label,
                     h + 1, failed[h], killed[h], fates[h][0], fates[h][1]);
    /* Released after each run, and the record holds the last slot on a quorum. */
    it_run o;
    dlock_on(&o, j->servers, "status", j->name, (const char *)NULL);
    it_expect_status(&o, 0);
    char free_line[80];
    snprintf(free_line, sizeof free_line, "%s: free", j->name);
    assert_non_null(strstr(o.out, free_line));
    int recorded = 0;
    for (int i = 0; i < j->n; i++) {
        char key[256];
        snprintf(key, sizeof key, "dlock:{%s}:slot", j->name);
        char *v = NULL;
        redisReply *r = dh_cmd(&j->srv[i], "HGET %s slot_ms", key);
        assert_non_null(r);
        if (r->type == REDIS_REPLY_STRING)
            v = r->str;
        recorded += v != NULL && strtoll(v, NULL, 10) == prev * 1000;
        freeReplyObject(r);
    }
    assert_true(recorded >= j->n / 2 + 1 || j->n == 0);
    print_message("FIG schedule_%s_runs %d runs of %d firings\n", j->label, lines, HOSTS * TICKS);
    free(text);
}

/* Five jobs, three hosts each, all at once over one window of three whole slots. */
static void fleet_once_per_slot(void **state)
{
    (void)state;
    char preload[600];
    faketime_preload(preload, sizeof preload);
    (void)dh_cli_path(); /* exits here when unset, not in 15 hosts */
    job jobs[JOBS] = {
        {.label = "one_server", .name = "cron-one", .servers = srv.url, .srv = &srv, .n = 1},
        {.label = "fail_kill", .name = "cron-fail", .servers = srv.url, .srv = &srv, .n = 1},
        {.label = "redlock", .name = "cron-rl", .servers = rl_urls, .srv = rl, .n = 3},
        {.label = "file", .name = "cron-file", .servers = file_url},
        {.label = "skewed", .name = "cron-skew", .servers = srv.url, .srv = &srv, .n = 1},
    };
    jobs[1].fail_kill = true;
    /* A host far ahead, one far behind, and one nearly a slot ahead. */
    const char *const clocks[HOSTS] = {"+30s", "-20s", "+1.9s"};
    const int64_t skews[HOSTS] = {30000, -20000, 1900};
    memcpy(jobs[4].clock, clocks, sizeof clocks);
    memcpy(jobs[4].skew_ms, skews, sizeof skews);
    for (int i = 0; i < JOBS; i++)
        snprintf(jobs[i].file, sizeof jobs[i].file, "%s", path(jobs[i].name));
    host_log *logs = mmap(NULL, sizeof(host_log) * JOBS * HOSTS, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(logs != MAP_FAILED);
    memset(logs, 0, sizeof(host_log) * JOBS * HOSTS);

    /* Every clock here is this machine's: the servers' TIME, the file:// clock and the
     * hosts' (before their skew). The first whole slot starts at least 0.5 s from now
     * (time to fork); its first tick is 100 ms before it. */
    int64_t begin[JOBS], end[JOBS];
    for (int i = 0; i < JOBS; i++)
        begin[i] = server_ms(jobs[i].srv);
    int64_t now = realtime_ms(), t0 = now + 500 + PERIOD_MS - (now + 500) % PERIOD_MS;
    /* The jitter's seed: DLOCK_TEST_SEED repeats a run's. */
    const char *given = getenv("DLOCK_TEST_SEED");
    unsigned seed = given != NULL ? (unsigned)strtoul(given, NULL, 10) : (unsigned)now;
    print_message("seed %u, first whole slot %lld\n", seed, (long long)t0 / 1000);
    pid_t pids[JOBS * HOSTS];
    for (int i = 0; i < JOBS * HOSTS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            host(&jobs[i / HOSTS], i % HOSTS, t0, preload, &logs[i], seed + (unsigned)i);
            _exit(0);
        }
    }
    /* Every host gone before anything is judged: a late run would write after. */
    int late = 0, failed = 0;
    for (int i = 0; i < JOBS * HOSTS; i++) {
        int64_t left = t0 + TICKS * 1000 - realtime_ms();
        int st;
        late += !dh_reap(pids[i], (left > 0 ? left : 0) + 10000 * dh_slack(), &st);
        failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    for (int i = 0; i < JOBS; i++)
        end[i] = server_ms(jobs[i].srv);
    print_message("FIG schedule_fleet_ms %lld ms\n", (long long)(realtime_ms() - now));
    assert_int_equal(late, 0);
    assert_int_equal(failed, 0);
    for (int i = 0; i < JOBS; i++)
        check_job(&jobs[i], &logs[i * HOSTS], t0, begin[i], end[i]);
    munmap(logs, sizeof(host_log) * JOBS * HOSTS);
}

/* ---- --min-hold ------------------------------------------------------------------ */

static void min_hold(void **state)
{
    (void)state;
    it_run o;
    /* CMD's status comes back at once; the hold is left on the server. */
    int64_t before = server_ms(&srv), t = dh_now_ms();
    DLOCK(&o, "run", "-v", "--min-hold", "1.5s", "hold", "--", "sh", "-c", "sleep 0.1; exit 3");
    int64_t took = dh_now_ms() - t, after = server_ms(&srv);
    expect_line(&o, 3, "run hold: CMD ended; the lock stays held ");
    assert_non_null(strstr(o.err, " more (--min-hold)\n"));
    if (took >= 1500)
        fail_msg("dlock exited %lld ms after it started: it waited for the hold", (long long)took);
    print_message("FIG min_hold_exit_ms %lld ms\n", (long long)took);
    /* The lease ends 1.5 s after the lock was taken, which was between before and
     * after on the server's clock. */
    char key[256];
    it_key(key, sizeof key, "hold");
    long long expiry = it_int_reply(dh_cmd(&srv, "PEXPIRETIME %s", key));
    if (expiry < before + 1500 || expiry > after + 1500)
        fail_msg("lease ends at %lld, not 1.5 s after the lock was taken (%lld..%lld)", expiry,
                 (long long)before, (long long)after);
    assert_true(it_pttl(&srv, key) > 0);
    DLOCK(&o, "run", "-w", "0", "hold", "--", "true");
    expect_line(&o, 75, "lock is held by another owner");
    /* Then it runs out by itself, a plain lease nobody renews. */
    while (it_exists(&srv, key) == 1) {
        long long e = it_int_reply(dh_cmd(&srv, "PEXPIRETIME %s", key));
        if (e != expiry && e != -2)
            fail_msg("the held lease moved from %lld to %lld", expiry, e);
        if (dh_now_ms() - t > (1500 + 1000) * dh_slack())
            fail_msg("the lock is still held %lld ms after the run began",
                     (long long)(dh_now_ms() - t));
        dh_sleep_ms(20);
    }
    assert_true(server_ms(&srv) >= expiry);
    DLOCK(&o, "run", "-w", "0", "hold", "--", "true");
    expect_silent(&o, 0);

    /* A hold shorter than CMD changes nothing: released when CMD ends. */
    DLOCK(&o, "run", "--min-hold", "100ms", "hold", "--", "sleep", "0.3");
    expect_silent(&o, 0);
    assert_int_equal(it_exists(&srv, key), 0);
}

/* ---- -E and -v -------------------------------------------------------------------- */

/* A busy lock: -E's code and silence, -v says why, no -E is 75 with a line. CMD never
 * runs. Another error stays an error. */
static void conflict_busy(void **state)
{
    (void)state;
    it_run o;
    char token[DLOCK_TOKEN_LEN + 1];
    const char *ran = path("busy.ran");
    DLOCK(&o, "acquire", "-t", "30s", "-w", "0", "busy");
    it_expect_status(&o, 0);
    assert_int_equal(sscanf(o.out, "%32s", token), 1);

    DLOCK(&o, "run", "-w", "0", "-E", "0", "busy", "--", "touch", ran);
    expect_silent(&o, 0);
    DLOCK(&o, "run", "-w", "0", "-E", "9", "busy", "--", "touch", ran);
    expect_silent(&o, 9);
    DLOCK(&o, "run", "-w", "0", "-E", "0", "-v", "busy", "--", "touch", ran);
    expect_line(&o, 0, "dlock: run busy: lock is held by another owner (");
    DLOCK(&o, "run", "-w", "200ms", "--conflict-exit-code", "0", "--verbose", "busy", "--", "touch",
          ran);
    expect_line(&o, 0, "dlock: run busy: lock is held by another owner (");
    DLOCK(&o, "run", "-w", "0", "busy", "--", "touch", ran);
    expect_line(&o, 75, "dlock: run busy: lock is held by another owner (");
    assert_int_equal(access(ran, F_OK), -1);
    DLOCK(&o, "release", "busy", token);
    it_expect_status(&o, 0);

    /* Unreachable servers are not a busy lock: 69 and a line, whatever -E says. */
    char url[64];
    int port = dh_free_port("127.0.0.1");
    assert_true(port > 0);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    dlock_on(&o, url, "run", "-w", "0", "-E", "0", "busy", "--", "touch", ran, (const char *)NULL);
    expect_line(&o, 69, "run busy: ");
    assert_int_equal(access(ran, F_OK), -1);
}

/* A slot that already ran: claimed once with -v (the line, DLOCK_SLOT, the record);
 * then -E 0 silent, -E 0 -v why, no -E 75; CMD never runs again, the lock is let go. */
static void conflict_slot_ran(void **state)
{
    (void)state;
    const int64_t day = 86400000;
    it_run o;
    /* A day's slot, and not its last 10 s (times the slack): the runs below must all
     * fall in it. */
    int64_t before = server_ms(&srv);
    if (day - before % day < 10000 * dh_slack()) {
        dh_sleep_ms(day - before % day + 10);
        before = server_ms(&srv);
    }
    char script[700], want[400], when[32];
    snprintf(script, sizeof script, "echo \"$DLOCK_SLOT\" > '%s'", path("ran.slot"));
    DLOCK(&o, "run", "--once-per", "1d", "-v", "daily", "--", "sh", "-c", script);
    int64_t after = server_ms(&srv);
    long long slot = (before - before % day) / 1000;
    utc(slot, when);
    snprintf(want, sizeof want,
             "dlock: run daily: slot %s claimed (DLOCK_SLOT=%lld), running CMD\n", when, slot);
    it_expect_status(&o, 0);
    assert_string_equal(o.out, "");
    assert_string_equal(o.err, want);
    char *seen = it_slurp(path("ran.slot"));
    snprintf(want, sizeof want, "%lld\n", slot);
    assert_string_equal(seen, want);
    free(seen);
    /* The record: this slot, claimed between before and after, by "host:pid". */
    redisReply *r = dh_cmd(&srv, "HMGET dlock:{daily}:slot slot_ms at_ms by");
    assert_true(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r->element[i]->type, REDIS_REPLY_STRING);
    assert_int_equal(strtoll(r->element[0]->str, NULL, 10), slot * 1000);
    long long at = strtoll(r->element[1]->str, NULL, 10);
    assert_true(at >= before && at <= after);
    char host[256], by[300];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    snprintf(by, sizeof by, "%s", r->element[2]->str);
    freeReplyObject(r);
    assert_true(strncmp(by, host, strlen(host)) == 0 && by[strlen(host)] == ':');

    const char *again = path("ran.again");
    DLOCK(&o, "run", "--once-per", "1d", "-E", "0", "daily", "--", "touch", again);
    expect_silent(&o, 0);
    DLOCK(&o, "run", "--once-per", "1d", "-E", "0", "-v", "daily", "--", "touch", again);
    snprintf(want, sizeof want,
             "dlock: run daily: this slot already ran (slot %s was claimed "
             "already, at ",
             when);
    expect_line(&o, 0, want);
    snprintf(want, sizeof want, " by %s)\n", by);
    assert_non_null(strstr(o.err, want));
    DLOCK(&o, "run", "--once-per", "1d", "daily", "--", "touch", again);
    expect_line(&o, 75, "run daily: this slot already ran (");
    assert_int_equal(access(again, F_OK), -1);
    assert_int_equal(key_exists(&srv, "daily", ""), 0); /* each refusal released */
}

/* Refused before anything reaches a server: 64 and one line; CMD never runs. */
static void usage_errors(void **state)
{
    (void)state;
    const char *ran = path("usage.ran");
    static const struct {
        const char *args[4], *needle;
    } cases[] = {
        {{"-E", "256"}, "invalid exit code \"256\": 0 to 255"},
        {{"-E", "x"}, "invalid exit code \"x\""},
        {{"-E", "-1"}, "invalid exit code \"-1\""},
        {{"--once-per", "1.5s"}, "invalid --once-per \"1.5s\": a period is whole seconds"},
        {{"--once-per", "0"}, "invalid --once-per \"0\""},
        {{"--once-per", "367d"}, "invalid --once-per \"367d\""},
        {{"--once-per", "1s", "--shared"}, "--once-per needs an exclusive lock"},
        {{"--min-hold", "0"}, "invalid --min-hold \"0\""},
    };
    it_run o;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *a = cases[i].args;
        if (a[2] != NULL)
            DLOCK(&o, "run", a[0], a[1], a[2], "usage", "--", "touch", ran);
        else
            DLOCK(&o, "run", a[0], a[1], "usage", "--", "touch", ran);
        expect_line(&o, 64, cases[i].needle);
    }
    DLOCK(&o, "sem", "run", "-n", "2", "--once-per", "1s", "usage", "--", "touch", ran);
    expect_line(&o, 64, "sem run: --once-per needs an exclusive lock");
    assert_int_equal(access(ran, F_OK), -1);
    assert_int_equal(key_exists(&srv, "usage", ""), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fleet_once_per_slot), cmocka_unit_test(min_hold),
        cmocka_unit_test(conflict_busy),       cmocka_unit_test(conflict_slot_ran),
        cmocka_unit_test(usage_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
