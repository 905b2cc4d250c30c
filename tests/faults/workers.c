/*
 * workers.c: worker processes (their loop, spawning and reaping them), their recorded
 * calls, the fenced register, process resources (workers.h). A scenario file's
 * scaffolding around them is scenario.c.
 */
#include "workers.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

wk_shared *wk_shared_new(void)
{
    void *p =
        mmap(NULL, sizeof(wk_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p; /* anonymous mappings are zero-filled */
}

void wk_shared_free(wk_shared *sh)
{
    if (sh != NULL)
        munmap(sh, sizeof *sh);
}

int wk_stop_init(wk_stop *s)
{
    int p[2];
    /* Not CLOEXEC: nothing here execs, and the workers inherit the read end. */
    if (pipe(p) < 0)
        return -1;
    s->rd = p[0];
    s->wr = p[1];
    return 0;
}

void wk_stop_fire(wk_stop *s)
{
    /* Never read by anyone, so the byte keeps the read end readable for every worker. */
    ssize_t n = write(s->wr, "x", 1);
    (void)n;
}

void wk_stop_close(wk_stop *s)
{
    close(s->rd);
    close(s->wr);
    s->rd = s->wr = -1;
}

static bool stopped(const wk_config *cfg)
{
    if (cfg->cancel_fd <= 0)
        return false;
    struct pollfd p = {.fd = cfg->cancel_fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* ---- process resources ---------------------------------------------------------- */

static void sample(wk_stats *s)
{
    memset(s, 0, sizeof *s);
    s->fds = dh_fd_count();
    s->threads = dh_thread_count();
    s->rss_kb = (long)dh_status_kib("VmRSS");
}

void wk_proc_stats(wk_stats *s)
{
    /* A joined thread can still be counted for a moment: pthread_join returns when the
     * kernel clears the thread's tid, a little before the thread leaves the count in
     * /proc/self/status. So a count is taken once it has held for 10 ms (200 ms at
     * most): a baseline read just after a client was freed would otherwise include a
     * thread on its way out, and the count after would look like a thread lost. */
    sample(s);
    for (int i = 0, same = 0; i < 100 && same < 5; i++) {
        dh_sleep_ms(2);
        wk_stats t;
        sample(&t);
        same = t.threads == s->threads ? same + 1 : 0;
        *s = t;
    }
}

void wk_proc_stats_after(const wk_stats *before, wk_stats *after)
{
    /* A leak stays; a thread on its way out is gone within ms, even on a loaded
     * machine where it takes longer than the 10 ms a count must hold. */
    wk_proc_stats(after);
    for (int i = 0; i < 100 && after->threads > before->threads; i++) {
        dh_sleep_ms(2);
        sample(after);
    }
}

long wk_rss_bound_kb(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1L << 30;
#else
    /* valgrind's shadow memory and its own allocator make RSS meaningless here. */
    const char *pre = getenv("LD_PRELOAD");
    if (pre != NULL && strstr(pre, "vgpreload") != NULL)
        return 1L << 30;
    return 2048;
#endif
}

/* ---- the worker --------------------------------------------------------------- */

/* The renewal thread found the lock lost: record it. Only a write(2), as on_lost
 * must not block. */
typedef struct lost_ctx {
    hist_writer *hw;
} lost_ctx;

static void on_lost(dlock_lock *l, void *user)
{
    lost_ctx *ctx = user;
    hist_put(ctx->hw, HIST_LOST, DLOCK_ERR_LOST, 0, l, 0, 0);
}

static dlock_client *make_client(const wk_config *cfg, const char *servers)
{
    dlock_config dc = {0};
    dc.timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 100 * dh_slack();
    dc.connect_timeout_ms = 1000 * dh_slack();
    dc.max_lease_ms = cfg->max_lease_ms;
    dc.restart_voting = cfg->restart_voting;
    dc.fence_mode = cfg->fence_mode;
    dlock_client *c = NULL;
    int rc = dlock_client_new(servers, &dc, &c);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "worker %d: client %s: %s: %s\n", cfg->id, servers, dlock_errname(rc),
                dlock_errmsg());
        return NULL;
    }
    return c;
}

/* Read the register's counter over a plain connection (the read half of the
 * read-modify-write). -1 on error. */
static int read_register(redisContext *rc, const char *key, uint64_t *value, uint64_t *fence)
{
    redisReply *r = redisCommand(rc, "HMGET %s value fence", key);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return -1;
    }
    *value = r->element[0]->type == REDIS_REPLY_STRING ? strtoull(r->element[0]->str, NULL, 10) : 0;
    *fence = r->element[1]->type == REDIS_REPLY_STRING ? strtoull(r->element[1]->str, NULL, 10) : 0;
    freeReplyObject(r);
    return 0;
}

static redisContext *connect_url(const char *url)
{
    /* The support library's URLs are "redis://127.0.0.1:PORT". */
    const char *colon = strrchr(url, ':');
    int port = colon ? atoi(colon + 1) : 6379;
    struct timeval tv = {.tv_sec = 2 * dh_slack(), .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* One warm-up cycle (a client made, a lock taken and renewed, released, freed), so
 * that one-time allocations (OpenSSL's digest tables, a thread stack glibc keeps for
 * reuse) are in the baseline rather than counted as growth. */
static void warm_up(const wk_config *cfg)
{
    dlock_client *c = make_client(cfg, cfg->servers);
    if (c == NULL)
        return;
    char name[64];
    snprintf(name, sizeof name, "warmup-%d-%ld", cfg->id, (long)getpid());
    dlock_opts o = {0};
    o.ttl_ms = 1000;
    o.auto_renew = 1;
    dlock_lock *l = NULL, *again = NULL;
    if (dlock_acquire(c, name, &o, &l) == DLOCK_OK) {
        /* The same name again, waiting briefly: refused (not reentrant), and the
         * wait starts the client's subscriber thread. */
        o.wait_ms = 20;
        o.auto_renew = 0;
        if (dlock_acquire(c, name, &o, &again) == DLOCK_OK)
            dlock_release(again);
        dlock_release(l);
    }
    dlock_client_free(c);
}

int wk_main(const wk_config *cfg)
{
    hist_writer hw;
    if (hist_open(&hw, cfg->history, cfg->id) < 0)
        return 2;
    wk_shared *sh = cfg->shared;
    if (sh != NULL)
        atomic_store(&sh->pid[cfg->id], (int)getpid());
    hist_put(&hw, HIST_WORKER_START, 0, 0, NULL, 0, 0);
    srandom((unsigned)getpid());

    warm_up(cfg);
    wk_stats before, after;
    wk_proc_stats(&before);

    dlock_client *c = make_client(cfg, cfg->servers);
    dlock_client *res = cfg->resource ? make_client(cfg, cfg->resource) : NULL;
    redisContext *rx = cfg->resource ? connect_url(cfg->resource) : NULL;
    if (c == NULL || (cfg->resource && (res == NULL || rx == NULL))) {
        fprintf(stderr, "worker %d: cannot set up its clients\n", cfg->id);
        return 3;
    }
    lost_ctx lctx = {&hw};
    dlock_opts o = {0};
    o.ttl_ms = cfg->ttl_ms;
    o.wait_ms = cfg->wait_ms;
    o.linger_ms = cfg->linger_ms;
    o.cancel_fd = cfg->cancel_fd > 0 ? cfg->cancel_fd : 0;
    o.auto_renew = cfg->auto_renew;
    char label[32];
    snprintf(label, sizeof label, "w%d", cfg->id);
    o.label = label;
    if (cfg->auto_renew) {
        o.on_lost = on_lost;
        o.on_lost_user = &lctx;
    }

    int done = 0;
    while (!stopped(cfg) && (cfg->sections == 0 || done < cfg->sections)) {
        if (cfg->before_acquire != NULL)
            cfg->before_acquire(cfg);
        hist_put(&hw, HIST_ACQ_INVOKE, 0, 0, NULL, 0, 0);
        int64_t t0 = hist_now_ns();
        dlock_lock *l = NULL;
        int rc = dlock_acquire(c, cfg->name, &o, &l);
        if (rc != DLOCK_OK) {
            hist_put(&hw, HIST_ACQ_FAIL, rc, t0, NULL, 0, 0);
            if (rc == DLOCK_ERR_CANCELED)
                break;
            if (cfg->verbose)
                fprintf(stderr, "worker %d: acquire: %s: %s\n", cfg->id, dlock_errname(rc),
                        dlock_errmsg());
            /* Servers down or busy: try again soon (the test bounds the run). */
            dh_sleep_ms(5 + random() % 20);
            continue;
        }
        hist_put(&hw, HIST_ACQ_OK, 0, t0, l, 0, 0);
        if (sh != NULL) {
            atomic_store(&sh->fence[cfg->id], dlock_fence(l));
            atomic_store(&sh->enter_ns[cfg->id], (long long)hist_now_ns());
            atomic_store(&sh->in_section[cfg->id], 1);
        }
        hist_put(&hw, HIST_ENTER, 0, 0, l, 0, 0);
        uint64_t value = 0, rfence = 0;
        bool have_read = false;
        if (rx != NULL) {
            have_read = read_register(rx, cfg->reg_key, &value, &rfence) == 0;
            if (have_read)
                hist_put(&hw, HIST_READ, 0, 0, l, value, rfence);
            else
                fprintf(stderr, "worker %d: register read failed\n", cfg->id);
        }
        dh_sleep_ms(cfg->work_ms); /* 0: none (nanosleep of nothing) */
        if (have_read)
            wk_write_rec(&hw, res, cfg->reg_key, l, value + 1);
        /* Cleared before EXIT is recorded: a worker stopped while the flag still says 1
         * has not ended its section (the pause test counts on it). */
        if (sh != NULL)
            atomic_store(&sh->in_section[cfg->id], 0);
        hist_put(&hw, HIST_EXIT, 0, 0, l, 0, 0);
        if (cfg->check_when_late && dlock_remaining_ms(l) <= 0) {
            int64_t c0 = hist_now_ns();
            int crc = dlock_check(l);
            hist_put(&hw, HIST_CHECK, crc, c0, l, 0, 0);
        }
        rc = wk_release_rec(&hw, l);
        if (rc != DLOCK_OK && cfg->verbose)
            fprintf(stderr, "worker %d: release: %s: %s\n", cfg->id, dlock_errname(rc),
                    dlock_errmsg());
        done++;
        if (sh != NULL)
            atomic_fetch_add(&sh->sections[cfg->id], 1);
    }
    redisFree(rx);
    dlock_client_free(res);
    dlock_client_free(c);
    wk_proc_stats_after(&before, &after);
    hist_rec end;
    memset(&end, 0, sizeof end);
    end.type = HIST_WORKER_END;
    end.fence = (uint64_t)before.fds;
    end.value = (uint64_t)after.fds;
    end.aux = ((uint64_t)before.threads << 32) | (uint32_t)after.threads;
    end.start_ns = before.rss_kb;
    end.deadline_ns = after.rss_kb;
    hist_write(&hw, &end);
    if (after.fds != before.fds || after.threads != before.threads)
        fprintf(stderr, "worker %d: fds %d -> %d, threads %d -> %d\n", cfg->id, before.fds,
                after.fds, before.threads, after.threads);
    hist_close(&hw);
    return 0;
}

pid_t wk_spawn(const wk_config *cfg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* Die with the test; leave by _exit (support.h: no atexit hooks here). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(99);
        int st = wk_main(cfg);
        fflush(stdout);
        fflush(stderr);
        _exit(st);
    }
    return pid;
}

int wk_reap(pid_t pid, int64_t timeout_ms)
{
    int status = 0;
    int64_t until = dh_now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return -1;
        if (dh_now_ms() >= until) {
            fprintf(stderr, "worker %ld still running after %lld ms: killed\n", (long)pid,
                    (long long)timeout_ms);
            kill(pid, SIGCONT);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        dh_sleep_ms(5);
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

int wk_spawn_all(const wk_config *tmpl, int n, pid_t *pids)
{
    for (int i = 0; i < n; i++) {
        wk_config cfg = *tmpl;
        cfg.id = i;
        pids[i] = wk_spawn(&cfg);
        if (pids[i] < 0)
            return -1;
    }
    return 0;
}

int wk_reap_all(pid_t *pids, int n, int64_t timeout_ms)
{
    int64_t until = dh_now_ms() + timeout_ms;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        int64_t left = until - dh_now_ms();
        int st = wk_reap(pids[i], left > 0 ? left : 0);
        if (st != 0) {
            fprintf(stderr, "worker %d (pid %ld) ended with status %d\n", i, (long)pids[i], st);
            bad++;
        }
        pids[i] = 0;
    }
    return bad;
}

/* ---- recorded calls -------------------------------------------------------------- */

int wk_acquire_rec(const hist_writer *hw, dlock_client *c, const char *name, const dlock_opts *o,
                   dlock_lock **out)
{
    hist_put(hw, HIST_ACQ_INVOKE, 0, 0, NULL, 0, 0);
    int64_t t0 = hist_now_ns();
    int rc = dlock_acquire(c, name, o, out);
    if (rc == DLOCK_OK)
        hist_put(hw, HIST_ACQ_OK, 0, t0, *out, 0, 0);
    else
        hist_put(hw, HIST_ACQ_FAIL, rc, t0, NULL, 0, 0);
    return rc;
}

int wk_write_rec(const hist_writer *hw, dlock_client *res, const char *reg_key, const dlock_lock *l,
                 uint64_t value)
{
    char buf[24];
    int len = snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    hist_put(hw, HIST_WRITE_INVOKE, 0, 0, l, value, 0);
    int64_t t0 = hist_now_ns();
    int rc = dlock_fenced_set(res, reg_key, dlock_fence(l), buf, (size_t)len);
    int type = rc == DLOCK_OK           ? HIST_WRITE_OK
               : rc == DLOCK_ERR_FENCED ? HIST_WRITE_REJECTED
                                        : HIST_WRITE_FAIL;
    hist_put(hw, type, rc, t0, l, value, 0);
    return rc;
}

int wk_release_rec(const hist_writer *hw, dlock_lock *l)
{
    hist_rec rel;
    memset(&rel, 0, sizeof rel);
    rel.type = HIST_RELEASE;
    rel.fence = dlock_fence(l);
    hist_token_bytes(dlock_token(l), rel.token);
    hist_put(hw, HIST_RELEASE_INVOKE, 0, 0, l, 0, 0);
    rel.start_ns = hist_now_ns();
    rel.rc = dlock_release(l);
    /* LOST for a lease run out by our clock, of a token a quorum still held (and
     * released): dlock.h says the detail begins "released,". */
    rel.aux = rel.rc == DLOCK_ERR_LOST && strncmp(dlock_errmsg(), "released,", 9) == 0;
    hist_write(hw, &rel);
    return rel.rc;
}

/* ---- the register ----------------------------------------------------------------- */

int wk_register_read(dh_server *res, const char *key, uint64_t *value, uint64_t *fence)
{
    redisContext *c = dh_connect(res);
    if (c == NULL)
        return -1;
    int rc = read_register(c, key, value, fence);
    redisFree(c);
    return rc;
}
