/*
 * netns.c: the private network of scenario 12 (netns.h has the picture).
 *
 * Everything is done with the ip and iptables-restore commands, run through the
 * support library's dh_run (captured output, PR_SET_PDEATHSIG), except two things that
 * need this process itself: moving a thread into a namespace (setns), and starting a
 * redis-server inside a node's namespace, which the support library does with a child
 * hook that enters the namespace before exec, so that the PID we stop is the server's
 * own.
 */
#include "netns.h"

#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NETNS_DIR "/run/netns"
#define PREFIX    "dlns"

/* Absolute paths of the tools, found by dn_preflight (CTest's PATH may lack sbin). */
static char g_ip[256], g_iptables_restore[256], g_redis[256];

/* The one network of this process, for the atexit hook; its owner, so that a forked
 * worker that calls exit() does not tear down its parent's network. */
static dn_net *g_net;
static pid_t g_owner;

/* ---- tools --------------------------------------------------------------------- */

int dn_preflight(void)
{
    int bad = 0;
    if (geteuid() != 0) {
        fprintf(stderr, "netns: FATAL: scenario 12 (network namespaces) must run as root: it "
                        "creates namespaces, veth links and iptables rules. CI runs as root; run "
                        "`make test-faults` as root.\n");
        bad = 1;
    }
    if (dh_find_exe("ip", NULL, g_ip, sizeof g_ip) != 0) {
        fprintf(stderr, "netns: FATAL: the ip command is missing (apt-get install iproute2)\n");
        bad = 1;
    }
    if (dh_find_exe("iptables-restore", NULL, g_iptables_restore, sizeof g_iptables_restore) != 0) {
        fprintf(stderr, "netns: FATAL: iptables-restore is missing; partitions are iptables "
                        "rules (apt-get install iptables)\n");
        bad = 1;
    }
    if (dh_find_exe("redis-server", "DLOCK_REDIS_SERVER", g_redis, sizeof g_redis) != 0) {
        fprintf(stderr, "netns: FATAL: redis-server not found (PATH or $DLOCK_REDIS_SERVER; "
                        "apt-get install redis-server)\n");
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* Run a command; on failure print it with its output. Returns its exit status. */
static int run(const char *const argv[])
{
    char out[2048], err[2048];
    int rc = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "netns: command failed (status %d):", rc);
        for (int i = 0; argv[i]; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\nnetns:   %s%s", err, out);
        if (!strchr(err, '\n') && !strchr(out, '\n'))
            fputc('\n', stderr);
    }
    return rc;
}

#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

static bool ns_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, NETNS_DIR "/%s", name);
    return access(path, F_OK) == 0;
}

static int open_ns(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, NETNS_DIR "/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fprintf(stderr, "netns: open %s: %s\n", path, strerror(errno));
    return fd;
}

static int enter_ns(const char *name)
{
    int fd = open_ns(name);
    if (fd < 0)
        return -1;
    int rc = setns(fd, CLONE_NEWNET);
    if (rc < 0)
        fprintf(stderr, "netns: setns %s: %s\n", name, strerror(errno));
    close(fd);
    return rc;
}

/* ---- leftovers ------------------------------------------------------------------- */

/* Kill what still runs in a namespace (a server of a test that was killed outright,
 * if PR_SET_PDEATHSIG did not get it), then delete the namespace. */
static void delete_ns(const char *name)
{
    char out[4096] = "";
    const char *argv[] = {g_ip, "netns", "pids", name, NULL};
    if (dh_run(argv, NULL, out, sizeof out, NULL, 0) == 0) {
        for (char *p = strtok(out, " \n"); p; p = strtok(NULL, " \n")) {
            long pid = strtol(p, NULL, 10);
            if (pid > 1 && pid != getpid())
                kill((pid_t)pid, SIGKILL);
        }
    }
    RUN(g_ip, "netns", "del", name);
}

/* Delete the namespaces of tests whose process is gone. */
static void delete_leftovers(void)
{
    DIR *d = opendir(NETNS_DIR);
    if (!d)
        return;
    char names[32][256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && count < 32) {
        int pid;
        if (sscanf(e->d_name, PREFIX "%d-", &pid) != 1 || strncmp(e->d_name, PREFIX, 4) != 0)
            continue;
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(names[count++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < count; i++) {
        fprintf(stderr, "netns: deleting %s, left by a test that is gone\n", names[i]);
        delete_ns(names[i]);
    }
}

/* ---- servers ----------------------------------------------------------------------- */

/* Runs in the server's child (tests/support's dh_child_fn): enter the node's network
 * namespace before exec, so that the PID the library stops is the server's own. */
static int enter_ns_fd(void *arg)
{
    if (arg == NULL) /* a restart: the descriptor is closed (start_server) */
        return -1;
    return setns(*(const int *)arg, CLONE_NEWNET) < 0 ? -1 : 0;
}

/* Start node i's server in its namespace, on its address, and wait until it answers
 * from the admin namespace (where this thread is by now). */
static int start_server(dn_net *n, int i)
{
    int nsfd = open_ns(n->node[i]);
    if (nsfd < 0)
        return -1;
    const char *args[] = {"--protected-mode", "no", NULL};
    dh_server_opts o = {.bind = n->node_addr[i],
                        .port = DN_PORT,
                        .args = args,
                        .child_setup = enter_ns_fd,
                        .child_arg = &nsfd};
    int rc = dh_server_start_opts(&n->server[i], &o);
    close(nsfd);
    /* The descriptor is gone: a restart could not enter the namespace, so forbid it. */
    n->server[i].child_arg = NULL;
    return rc;
}

/* ---- the network ------------------------------------------------------------------ */

static void atexit_teardown(void)
{
    if (g_net != NULL && getpid() == g_owner)
        dn_teardown(g_net);
}

/* Add namespace name with its loopback up. */
static int add_ns(const char *name)
{
    if (RUN(g_ip, "netns", "add", name) != 0)
        return -1;
    return RUN(g_ip, "-n", name, "link", "set", "lo", "up");
}

/* Connect namespace ns to the bridge: eth0 inside with addr, port `port` on br0. */
static int plug(dn_net *n, const char *ns, const char *port, const char *addr)
{
    char cidr[24];
    snprintf(cidr, sizeof cidr, "%s/24", addr);
    if (RUN(g_ip, "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns",
            n->sw) != 0 ||
        RUN(g_ip, "-n", n->sw, "link", "set", port, "master", "br0", "up") != 0 ||
        RUN(g_ip, "-n", ns, "addr", "add", cidr, "dev", "eth0") != 0 ||
        RUN(g_ip, "-n", ns, "link", "set", "eth0", "up") != 0)
        return -1;
    return 0;
}

int dn_setup(dn_net *n, int nnodes, int nclients)
{
    memset(n, 0, sizeof *n);
    n->root_ns = -1;
    n->active = true;
    if (nnodes < 1 || nnodes > DN_NODES_MAX || nclients < 1 || nclients > DN_CLIENTS_MAX) {
        fprintf(stderr, "netns: %d nodes and %d clients: out of range\n", nnodes, nclients);
        return -1;
    }
    if (g_ip[0] == '\0' && dn_preflight() != 0)
        return -1;
    n->nnodes = nnodes;
    n->nclients = nclients;
    snprintf(n->prefix, sizeof n->prefix, PREFIX "%d", (int)getpid());
    snprintf(n->sw, sizeof n->sw, "%s-sw", n->prefix);
    snprintf(n->admin, sizeof n->admin, "%s-adm", n->prefix);
    snprintf(n->admin_addr, sizeof n->admin_addr, "198.18.0.200");
    size_t used = 0;
    for (int i = 0; i < nnodes; i++) {
        snprintf(n->node[i], sizeof n->node[i], "%s-n%d", n->prefix, i + 1);
        snprintf(n->node_addr[i], sizeof n->node_addr[i], "198.18.0.%d", 1 + i);
        used += (size_t)snprintf(n->urls + used, sizeof n->urls - used, "%sredis://%s:%d",
                                 i ? "," : "", n->node_addr[i], DN_PORT);
    }
    for (int j = 0; j < nclients; j++) {
        snprintf(n->client[j], sizeof n->client[j], "%s-c%d", n->prefix, j + 1);
        snprintf(n->client_addr[j], sizeof n->client_addr[j], "198.18.0.%d", 101 + j);
    }
    n->root_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (n->root_ns < 0) {
        fprintf(stderr, "netns: open /proc/self/ns/net: %s\n", strerror(errno));
        return -1;
    }
    g_net = n;
    if (g_owner == 0) {
        g_owner = getpid();
        atexit(atexit_teardown);
    }
    delete_leftovers();

    if (add_ns(n->sw) != 0 ||
        RUN(g_ip, "-n", n->sw, "link", "add", "br0", "type", "bridge", "stp_state", "0",
            "forward_delay", "0") != 0 ||
        RUN(g_ip, "-n", n->sw, "link", "set", "br0", "up") != 0)
        goto fail;
    for (int i = 0; i < nnodes; i++) {
        char port[16];
        snprintf(port, sizeof port, "pn%d", i + 1);
        if (add_ns(n->node[i]) != 0 || plug(n, n->node[i], port, n->node_addr[i]) != 0)
            goto fail;
    }
    for (int j = 0; j < nclients; j++) {
        char port[16];
        snprintf(port, sizeof port, "pc%d", j + 1);
        if (add_ns(n->client[j]) != 0 || plug(n, n->client[j], port, n->client_addr[j]) != 0)
            goto fail;
    }
    if (add_ns(n->admin) != 0 || plug(n, n->admin, "padm", n->admin_addr) != 0)
        goto fail;
    if (enter_ns(n->admin) != 0)
        goto fail;
    for (int i = 0; i < nnodes; i++)
        if (start_server(n, i) != 0)
            goto fail;
    return 0;
fail:
    fprintf(stderr, "netns: FATAL: could not build the test network (see above)\n");
    dn_teardown(n);
    return -1;
}

void dn_teardown(dn_net *n)
{
    if (!n->active)
        return;
    n->active = false;
    dh_servers_stop(n->server, n->nnodes);
    if (n->root_ns >= 0) {
        if (setns(n->root_ns, CLONE_NEWNET) < 0)
            fprintf(stderr, "netns: setns back to the original namespace: %s\n", strerror(errno));
        close(n->root_ns);
        n->root_ns = -1;
    }
    const char *all[DN_NODES_MAX + DN_CLIENTS_MAX + 2];
    int k = 0;
    all[k++] = n->admin;
    for (int j = 0; j < n->nclients; j++)
        all[k++] = n->client[j];
    for (int i = 0; i < n->nnodes; i++)
        all[k++] = n->node[i];
    all[k++] = n->sw;
    for (int i = 0; i < k; i++)
        if (all[i][0] && ns_exists(all[i]))
            delete_ns(all[i]);
    if (g_net == n)
        g_net = NULL;
}

int dn_enter_client(const dn_net *n, int j)
{
    return enter_ns(n->client[j]);
}

/* ---- faults ------------------------------------------------------------------------ */

void dn_cut(dn_net *n, int i, int j, enum dn_mode mode)
{
    n->cut[i][j] = mode;
}

void dn_cut_node(dn_net *n, int i, enum dn_mode mode)
{
    for (int j = 0; j < n->nclients; j++)
        n->cut[i][j] = mode;
}

void dn_link(dn_net *n, int i, bool up)
{
    n->link_down[i] = !up;
}

void dn_clear(dn_net *n)
{
    memset(n->cut, 0, sizeof n->cut);
    memset(n->link_down, 0, sizeof n->link_down);
}

/* Node i's rule set, for iptables-restore. The reset a REJECT sends is itself an
 * outgoing packet from port 6379: it is let through before the DROP of everything
 * else the node sends to that client. */
static int write_rules(const dn_net *n, int i, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "netns: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for (int j = 0; j < n->nclients; j++) {
        const char *c = n->client_addr[j];
        if (n->cut[i][j] == DN_DROP)
            fprintf(f, "-A INPUT -s %s/32 -p tcp --dport %d -j DROP\n", c, DN_PORT);
        if (n->cut[i][j] == DN_RESET) {
            fprintf(f, "-A INPUT -s %s/32 -p tcp --dport %d -j REJECT --reject-with tcp-reset\n", c,
                    DN_PORT);
            fprintf(f, "-A OUTPUT -d %s/32 -p tcp --sport %d --tcp-flags RST RST -j ACCEPT\n", c,
                    DN_PORT);
        }
        if (n->cut[i][j] != DN_PASS)
            fprintf(f, "-A OUTPUT -d %s/32 -p tcp --sport %d -j DROP\n", c, DN_PORT);
    }
    fprintf(f, "COMMIT\n");
    return fclose(f) == 0 ? 0 : -1;
}

int dn_apply(dn_net *n)
{
    const char *base = getenv("DLOCK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    for (int i = 0; i < n->nnodes; i++) {
        if (memcmp(n->cut[i], n->applied[i], sizeof n->cut[i]) == 0)
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s-rules-n%d", base, n->prefix, i + 1);
        int rc = write_rules(n, i, path);
        if (rc == 0)
            rc = RUN(g_ip, "netns", "exec", n->node[i], g_iptables_restore, path);
        unlink(path);
        if (rc != 0)
            return -1;
        memcpy(n->applied[i], n->cut[i], sizeof n->cut[i]);
    }
    for (int i = 0; i < n->nnodes; i++) {
        if (n->link_down[i] == n->applied_down[i])
            continue;
        if (RUN(g_ip, "-n", n->node[i], "link", "set", "eth0", n->link_down[i] ? "down" : "up") !=
            0)
            return -1;
        n->applied_down[i] = n->link_down[i];
    }
    return 0;
}

/* ---- helpers ----------------------------------------------------------------------- */

redisContext *dn_admin_connect(const dn_net *n, int i)
{
    struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout(n->node_addr[i], DN_PORT, tv);
    if (!c || c->err) {
        fprintf(stderr, "netns: admin connect to %s:%d: %s\n", n->node_addr[i], DN_PORT,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}
