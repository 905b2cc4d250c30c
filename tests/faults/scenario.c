/*
 * scenario.c: a scenario file's scaffolding (workers.h): its lock servers and resource
 * server as cmocka group fixtures, the history, shared page and stop switch of one
 * run, judging the run with the history checkers, the safety checks every scenario
 * makes, catching a worker in its section, and test randomness.
 */
#include "workers.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the servers, as group fixtures ---------------------------------------------- */

dh_server wk_srv[WK_NODES], wk_res;
char wk_urls[512];

int wk_res_setup(void **state)
{
    (void)state;
    return dh_server_start(&wk_res, NULL);
}

int wk_res_teardown(void **state)
{
    (void)state;
    dh_server_stop(&wk_res);
    return 0;
}

int wk_nodes_setup(void **state)
{
    (void)state;
    if (dh_servers_start(wk_srv, WK_NODES, NULL) < 0)
        return -1;
    dh_server_urls(wk_srv, WK_NODES, wk_urls, sizeof wk_urls);
    return 0;
}

int wk_nodes_teardown(void **state)
{
    (void)state;
    dh_servers_stop(wk_srv, WK_NODES);
    return 0;
}

int wk_servers_setup(void **state)
{
    if (wk_nodes_setup(state) < 0)
        return -1;
    return wk_res_setup(state);
}

int wk_servers_teardown(void **state)
{
    wk_nodes_teardown(state);
    return wk_res_teardown(state);
}

/* ---- one run --------------------------------------------------------------------- */

int wk_scenario_open(wk_scenario *sc, int n, const char *name, const char *fig)
{
    memset(sc, 0, sizeof *sc);
    sc->hw.fd = -1;
    sc->stop.rd = sc->stop.wr = -1;
    dh_server_urls(wk_srv, n, sc->urls, sizeof sc->urls);
    snprintf(sc->name, sizeof sc->name, "%s", name);
    snprintf(sc->reg, sizeof sc->reg, "register-%s", name);
    snprintf(sc->fig, sizeof sc->fig, "%s", fig);
    if (wk_history_new(sc->hist, sizeof sc->hist, name, &sc->hw, 1) != 0)
        return -1;
    sc->sh = wk_shared_new();
    if (sc->sh == NULL || wk_stop_init(&sc->stop) != 0) {
        fprintf(stderr, "wk: cannot make the shared page or the stop switch\n");
        wk_scenario_close(sc);
        return -1;
    }
    wk_config *c = &sc->cfg;
    c->servers = sc->urls;
    c->resource = wk_res.url;
    c->reg_key = sc->reg;
    c->name = sc->name;
    c->history = sc->hist;
    c->wait_ms = -1;
    c->cancel_fd = sc->stop.rd;
    c->shared = sc->sh;
    return 0;
}

int wk_scenario_open_n(wk_scenario *sc, int n, const char *name, const char *fig)
{
    char nm[sizeof sc->name], fg[sizeof sc->fig];
    snprintf(nm, sizeof nm, "%s-n%d", name, n);
    snprintf(fg, sizeof fg, "%s_n%d", fig, n);
    return wk_scenario_open(sc, n, nm, fg);
}

void wk_scenario_close(wk_scenario *sc)
{
    hist_close(&sc->hw);
    if (sc->stop.rd >= 0)
        wk_stop_close(&sc->stop);
    sc->stop.rd = sc->stop.wr = -1;
    if (sc->sh != NULL)
        wk_shared_free(sc->sh);
    sc->sh = NULL;
}

int wk_judge(const char *history, dh_server *res, const char *reg_key, const char *fig,
             hist_report *rep)
{
    int64_t final = -1;
    if (res != NULL) {
        uint64_t v = 0, f = 0;
        if (wk_register_read(res, reg_key, &v, &f) < 0)
            return -1;
        final = (int64_t)v;
        printf("INFO %s: register counter %llu, fence %llu\n", fig, (unsigned long long)v,
               (unsigned long long)f);
    }
    hist_log log;
    if (hist_load(history, &log) < 0)
        return -1;
    hist_check(&log, final, rep);
    hist_print(fig, rep);
    if (rep->granted_overlaps > 0)
        hist_print_overlaps(&log, 5);
    hist_free(&log);
    return 0;
}

pid_t wk_scenario_replace(wk_scenario *sc, const wk_config *cfg, int id, pid_t dead)
{
    hist_put(&sc->hw, HIST_FAULT, HIST_F_KILL, 0, NULL, atomic_load(&sc->sh->fence[id]),
             (uint64_t)dead);
    atomic_store(&sc->sh->in_section[id], 0);
    wk_config again = *cfg;
    again.id = id;
    return wk_spawn(&again);
}

int wk_scenario_judge(wk_scenario *sc, hist_report *rep)
{
    return wk_judge(sc->hist, &wk_res, sc->reg, sc->fig, rep);
}

int wk_history_new(char *hist, size_t len, const char *name, hist_writer *w, int n)
{
    snprintf(hist, len, "%s/%s.hist", wk_res.dir, name);
    if (hist_create(hist) != 0) {
        fprintf(stderr, "wk: cannot create the history %s\n", hist);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (hist_open(&w[i], hist, i < n - 1 ? i : -1) != 0) {
            fprintf(stderr, "wk: cannot open the history %s\n", hist);
            wk_history_close(w, i);
            return -1;
        }
    }
    return 0;
}

void wk_history_close(hist_writer *w, int n)
{
    for (int i = 0; i < n; i++)
        hist_close(&w[i]);
}

/* ---- checks and helpers ---------------------------------------------------------- */

/* One check of wk_safety_violations: 1 (after saying so) when the count is not 0. */
static int violated(const char *what, int64_t count)
{
    if (count == 0)
        return 0;
    fprintf(stderr, "wk: FAIL: %s = %lld, expected 0\n", what, (long long)count);
    return 1;
}

int wk_safety_violations(const hist_report *rep)
{
    return violated("fence_regressions", rep->fence_regressions) +
           violated("granted_overlaps", rep->granted_overlaps) +
           violated("stale_accepted", rep->stale_accepted) + violated("phantom", rep->phantom) +
           violated("fd_leaks", rep->fd_leaks) + violated("thread_leaks", rep->thread_leaks);
}

int wk_in_section(wk_shared *sh, const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0 && atomic_load(&sh->in_section[i]) && atomic_load(&sh->pid[i]) == pids[i])
            return i;
    return -1;
}

int wk_wait_in_section(wk_shared *sh, const pid_t *pids, int n, int64_t within_ms)
{
    int64_t until = dh_now_ms() + within_ms;
    int v;
    while ((v = wk_in_section(sh, pids, n)) < 0 && dh_now_ms() < until)
        dh_sleep_ms(1);
    return v;
}

int wk_stop_in_section(wk_shared *sh, pid_t pid, int id, uint64_t fence)
{
    if (kill(pid, SIGSTOP) != 0)
        return -1;
    /* kill() only queues the signal: wait until the worker is really stopped, so what
     * its flags say now is where it stopped. */
    int status;
    pid_t r;
    while ((r = waitpid(pid, &status, WUNTRACED)) < 0 && errno == EINTR)
        ;
    if (r != pid || !WIFSTOPPED(status))
        return -1;
    if (atomic_load(&sh->in_section[id]) && atomic_load(&sh->fence[id]) == fence)
        return 1;
    kill(pid, SIGCONT);
    return 0;
}

int wk_refuse_writes(dh_server *s, bool on)
{
    return dh_reply_status(dh_cmd(s, "CONFIG SET min-replicas-to-write %s", on ? "1" : "0"),
                           "CONFIG SET min-replicas-to-write");
}

pid_t wk_holder_pid(const char *d)
{
    /* "host:pid label": the pid follows the last ':' before the first space. */
    const char *sp = strchr(d, ' ');
    size_t len = sp ? (size_t)(sp - d) : strlen(d);
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (d[i] == ':')
            colon = d + i;
    return colon ? (pid_t)atol(colon + 1) : 0;
}

int64_t wk_rand(int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)((uint64_t)random() % (uint64_t)(hi - lo + 1));
}

void wk_seed(const char *test)
{
    const char *env = getenv("DLOCK_TEST_SEED");
    unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 10)
                                : (unsigned)(hist_now_ns() ^ (int64_t)getpid());
    srandom(seed);
    printf("INFO %s: seed %u (DLOCK_TEST_SEED repeats it)\n", test, seed);
}
