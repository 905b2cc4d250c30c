/*
 * itest.c: helpers shared by the integration tests (see itest.h); their files and
 * directories are in itest_files.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

dh_server it_srv;

int it_srv_setup(void **state)
{
    (void)state;
    assert_int_equal(dh_server_start(&it_srv, NULL), 0);
    return 0;
}

int it_srv_teardown(void **state)
{
    (void)state;
    dh_server_stop(&it_srv);
    return 0;
}

dh_server it_auth_srv;

int it_srv_auth_setup(void **state)
{
    (void)state;
    static const char *const auth_args[] = {"--requirepass", IT_PASSWORD, NULL};
    if (dh_server_start(&it_srv, NULL) != 0 || dh_server_start(&it_auth_srv, auth_args) != 0)
        return -1;
    return 0;
}

int it_srv_auth_teardown(void **state)
{
    (void)state;
    dh_server_stop(&it_srv);
    dh_server_stop(&it_auth_srv);
    return 0;
}

dh_server it_node[IT_NODES_MAX];
char it_node_urls[IT_NODES_MAX * 140];
int it_nodes;

static int nodes_start(int n)
{
    it_nodes = n;
    if (dh_servers_start(it_node, n, NULL) != 0)
        return -1;
    dh_server_urls(it_node, n, it_node_urls, sizeof it_node_urls);
    return 0;
}

int it_nodes_setup1(void **state)
{
    (void)state;
    return nodes_start(1);
}

int it_nodes_setup3(void **state)
{
    (void)state;
    return nodes_start(3);
}

int it_nodes_teardown(void **state)
{
    (void)state;
    dh_servers_stop(it_node, it_nodes);
    memset(it_node, 0, sizeof it_node);
    return 0;
}

dlock_client *it_nodes_client(void)
{
    dlock_config cfg;
    it_config_init(&cfg);
    return it_client_cfg(it_node_urls, &cfg);
}

dh_server it_relayed_srv[IT_RELAYED];
fr_relay *it_relay[IT_RELAYED];
char it_relayed_urls[IT_RELAYED * 64];

int it_relayed_setup(void **state)
{
    (void)state;
    assert_int_equal(fr_cluster_start(IT_RELAYED, it_relayed_srv, it_relay, it_relayed_urls,
                                      sizeof it_relayed_urls),
                     0);
    return 0;
}

int it_relayed_teardown(void **state)
{
    (void)state;
    fr_cluster_stop(IT_RELAYED, it_relayed_srv, it_relay);
    return 0;
}

int64_t it_timeout_ms(void)
{
    return 100 * dh_slack();
}

dlock_client *it_client_cfg(const char *servers, const dlock_config *cfg)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(servers, cfg, &c);
    if (rc != DLOCK_OK)
        fprintf(stderr, "dlock_client_new(%s): %s: %s\n", servers, dlock_errname(rc),
                dlock_errmsg());
    assert_int_equal(rc, DLOCK_OK);
    assert_non_null(c);
    return c;
}

dlock_client *it_client(dh_server *s, int64_t timeout_ms)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = timeout_ms;
    /* Connecting to a local server takes microseconds; a second is plenty and keeps a
     * broken test from hanging long. */
    cfg.connect_timeout_ms = 1000 * dh_slack();
    return it_client_cfg(s->url, &cfg);
}

void it_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "dlock:{%s}", name);
}

void it_fence_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "dlock:{%s}:fence", name);
}

void it_queue_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "dlock:{%s}:queue", name);
}

void it_wait_queued(const char *name, long long want)
{
    it_wait_queued_on(it_node, it_nodes, name, want);
}

void it_wait_queued_on(dh_server *s, int n, const char *name, long long want)
{
    char key[256];
    it_queue_key(key, sizeof key, name);
    int64_t until = dh_now_ms() + 3000 * dh_slack();
    for (;;) {
        int ok = 0;
        for (int i = 0; i < n; i++)
            ok += it_int_reply(dh_cmd(&s[i], "ZCARD %s", key)) == want;
        if (ok == n)
            return;
        if (dh_now_ms() > until)
            fail_msg("queue %s: not %lld entries on every node in time", key, want);
        dh_sleep_ms(5);
    }
}

dlock_pending *it_queue_waiter(dlock_client *w, const char *name, int64_t ttl_ms, dh_server *s,
                               int n)
{
    dlock_pending *p = NULL;
    dlock_opts o = {.ttl_ms = ttl_ms, .wait_ms = -1};
    assert_int_equal(dlock_acquire_start(w, name, &o, &p), DLOCK_OK);
    dlock_lock *none = NULL;
    assert_int_equal(dlock_pending_step(p, &none), DLOCK_ERR_AGAIN);
    it_wait_queued_on(s, n, name, 1);
    return p;
}

long long it_int_reply(redisReply *r)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long int_reply(dh_server *s, const char *cmd, const char *key)
{
    return it_int_reply(dh_cmd(s, "%s %s", cmd, key));
}

long long it_pttl(dh_server *s, const char *key)
{
    return int_reply(s, "PTTL", key);
}

long long it_exists(dh_server *s, const char *key)
{
    return int_reply(s, "EXISTS", key);
}

long long it_connected_clients(dh_server *s)
{
    redisReply *r = dh_cmd(s, "INFO clients");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *p = strstr(r->str, "connected_clients:");
    assert_non_null(p);
    long long n = strtoll(p + strlen("connected_clients:"), NULL, 10);
    freeReplyObject(r);
    return n;
}

char *it_get(dh_server *s, const char *key)
{
    redisReply *r = dh_cmd(s, "GET %s", key);
    assert_non_null(r);
    char *v = NULL;
    if (r->type == REDIS_REPLY_STRING)
        v = strdup(r->str);
    else
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    return v;
}

void it_del(dh_server *s, const char *key)
{
    redisReply *r = dh_cmd(s, "DEL %s", key);
    assert_non_null(r);
    freeReplyObject(r);
}

dlock_lock *it_acquire_opts(dlock_client *c, const char *name, const dlock_opts *o)
{
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, name, o, &l);
    if (rc != DLOCK_OK)
        fprintf(stderr, "dlock_acquire(%s): %s: %s\n", name, dlock_errname(rc), dlock_errmsg());
    assert_int_equal(rc, DLOCK_OK);
    assert_non_null(l);
    return l;
}

dlock_client *it_hot_client(void)
{
    dlock_client *hc = it_nodes_client(), *other = it_nodes_client();
    dlock_lock *held = it_acquire(other, "warm", 10000);
    dlock_opts o = {0};
    o.wait_ms = 50;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(hc, "warm", &o, &l), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_client_free(other);
    return hc;
}

dlock_lock *it_acquire(dlock_client *c, const char *name, int64_t ttl_ms)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    return it_acquire_opts(c, name, &o);
}

int it_rounds_run(const it_rounds *r)
{
    dlock_client *c = r->client;
    if (c == NULL && dlock_client_new(r->servers, r->cfg, &c) != DLOCK_OK)
        return IT_ROUNDS_CLIENT;
    int status = 0;
    for (int i = 0; i < r->rounds && status == 0; i++) {
        dlock_opts o = {0};
        o.ttl_ms = r->ttl_ms;
        o.wait_ms = -1;
        dlock_lock *l;
        int rc = r->permits > 0 ? dlock_sem_acquire(c, r->name, r->permits, &o, &l)
                                : dlock_acquire(c, r->name, &o, &l);
        if (rc != DLOCK_OK) {
            status = IT_ROUNDS_ACQUIRE;
            break;
        }
        status = r->section(l, r->arg);
        if (dlock_release(l) != DLOCK_OK && status == 0)
            status = IT_ROUNDS_RELEASE;
    }
    if (c != r->client)
        dlock_client_free(c);
    return status;
}

void it_fork_all(int n, int (*fn)(void *arg), void *arg)
{
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    assert_non_null(pid);
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0)
            _exit(fn(arg));
    }
    for (int i = 0; i < n; i++) {
        int st;
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("child %d of %d: %s %d", i, n, WIFEXITED(st) ? "exit" : "signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    free(pid);
}

it_board *it_board_new(void)
{
    it_board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(b != MAP_FAILED);
    memset(b, 0, sizeof *b);
    return b;
}

void it_board_free(it_board *b)
{
    munmap(b, sizeof *b);
}

void it_board_enter(it_board *b)
{
    int now = ++b->now, peak = b->peak;
    while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now))
        ;
}

void it_board_leave(it_board *b)
{
    b->now--;
    b->sections++;
}

static int board_hold(dlock_lock *l, void *arg)
{
    (void)l;
    it_board *b = arg;
    it_board_enter(b);
    dh_sleep_ms(b->hold_ms);
    it_board_leave(b);
    return 0;
}

static int rounds_child(void *arg)
{
    return it_rounds_run(arg);
}

it_board *it_board_procs(int procs, it_rounds *r, int64_t hold_ms)
{
    it_board *b = it_board_new();
    b->hold_ms = hold_ms;
    r->section = board_hold;
    r->arg = b;
    it_fork_all(procs, rounds_child, r);
    return b;
}

void it_warm_up(dlock_client *c, const char *name, int64_t ttl_ms)
{
    assert_int_equal(dlock_release(it_acquire(c, name, ttl_ms)), DLOCK_OK);
}

dlock_lock *it_acquire_on_all(dlock_client *c, const char *name, int64_t ttl_ms, dh_server *srv,
                              int n)
{
    dlock_server_facts facts[IT_NODES_MAX];
    int all = dlock_client_nservers(c);
    assert_true(n <= all && all <= IT_NODES_MAX);
    assert_int_equal(dlock_ping(c, facts, all), DLOCK_OK);
    for (int i = 0; i < n; i++)
        if (facts[i].error != DLOCK_OK)
            fail_msg("server %d: PING: %s (%s)", i, dlock_errname(facts[i].error), facts[i].detail);
    dlock_lock *l = it_acquire(c, name, ttl_ms);
    char key[256];
    it_key(key, sizeof key, name);
    int64_t until = dh_now_ms() + 500 * dh_slack();
    for (int i = 0; i < n; i++) {
        while (it_pttl(&srv[i], key) <= 0) {
            if (dh_now_ms() >= until)
                fail_msg("server %d does not hold %s", i, name);
            dh_sleep_ms(5);
        }
    }
    return l;
}

void it_show(const char *what, int err)
{
    printf("INFO %s -> %s (%s)\n", what, dlock_errname(err), err ? dlock_errmsg() : "");
}

void it_log_init(it_log *lg)
{
    memset(lg, 0, sizeof *lg);
    pthread_mutex_init(&lg->mu, NULL);
}

void it_log_cb(void *user, int level, const char *msg)
{
    it_log *lg = user;
    pthread_mutex_lock(&lg->mu);
    if (lg->n < IT_LOG_MAX) {
        lg->level[lg->n] = level;
        snprintf(lg->msg[lg->n], sizeof lg->msg[0], "%s", msg);
        lg->n++;
    }
    pthread_mutex_unlock(&lg->mu);
    printf("LOG level=%d %s\n", level, msg);
}

int it_log_count(it_log *lg, int level, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&lg->mu);
    for (int i = 0; i < lg->n; i++)
        if (lg->level[i] == level && (!needle || strstr(lg->msg[i], needle)))
            n++;
    pthread_mutex_unlock(&lg->mu);
    return n;
}

const char *const *it_cli_env(const dh_server *s)
{
    static char servers[160];
    static const char *env[3];
    snprintf(servers, sizeof servers, "DLOCK_SERVERS=%s", s->url);
    env[0] = servers;
    env[1] = "DLOCK_PASSWORD";
    env[2] = NULL;
    return env;
}

void it_config_init(dlock_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->timeout_ms = it_timeout_ms();
    cfg->connect_timeout_ms = 1000 * dh_slack();
}

long long it_cmd_calls(dh_server *s, const char *cmd)
{
    redisReply *r = dh_cmd(s, "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, field);
    long long v = p ? strtoll(p + strlen(field), NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

long long it_script_calls(dh_server *s)
{
    return it_cmd_calls(s, "evalsha") + it_cmd_calls(s, "eval");
}

int it_holding(dh_server *s, int n, const char *name, const dlock_lock *l)
{
    char key[256];
    it_key(key, sizeof key, name);
    int holding = 0;
    for (int i = 0; i < n; i++) {
        char *v = it_get(&s[i], key);
        holding += v != NULL && strncmp(v, dlock_token(l), DLOCK_TOKEN_LEN) == 0;
        free(v);
    }
    return holding;
}

void it_expect_shared(dlock_client *c, const char *name, dlock_holder *list, int max, int want)
{
    int n = -1;
    int64_t total = -1;
    assert_int_equal(dlock_inspect_shared(c, name, list, max, &n, &total), DLOCK_OK);
    assert_int_equal(n, want);
    assert_int_equal(total, want);
}

void it_expect_holder(dh_server *s, const char *name, const char *token)
{
    char key[256];
    it_key(key, sizeof key, name);
    char *value = it_get(s, key);
    assert_non_null(value);
    assert_memory_equal(value, token, DLOCK_TOKEN_LEN);
    free(value);
}

#define IT_CLI_ARGS_MAX 48

void it_cli_va(it_run *r, const char *const env[], const char *const *pre, va_list ap)
{
    const char *argv[IT_CLI_ARGS_MAX + 2];
    int n = 0;
    argv[n++] = dh_cli_path();
    for (; pre != NULL && *pre != NULL; pre++) {
        assert_true(n <= IT_CLI_ARGS_MAX);
        argv[n++] = *pre;
    }
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(n <= IT_CLI_ARGS_MAX);
        argv[n++] = a;
    }
    argv[n] = NULL;
    memset(r, 0, sizeof *r);
    r->status = dh_run(argv, env, r->out, sizeof r->out, r->err, sizeof r->err);
    assert_true(r->status >= 0);
}

void it_cli(it_run *r, const char *const env[], const char *const *pre, ...)
{
    va_list ap;
    va_start(ap, pre);
    it_cli_va(r, env, pre, ap);
    va_end(ap);
}

void it_expect_status(const it_run *r, int want)
{
    if (r->status != want)
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", r->status, want, r->out, r->err);
}

/* ---- TLS certificates ------------------------------------------------------------ */

char it_tls_dir[512];

const char *it_tls_file(const char *name)
{
    static char buf[8][600];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", it_tls_dir, name);
    return p;
}

int it_tls_setup(void **state)
{
    (void)state;
    if (dh_tls_dir(it_tls_dir, sizeof it_tls_dir) != 0 || dh_tls_make_set(it_tls_dir) != 0)
        return -1;
    return 0;
}

int it_tls_teardown(void **state)
{
    (void)state;
    dh_tls_dir_remove(it_tls_dir);
    return 0;
}
