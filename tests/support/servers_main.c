/*
 * servers_main.c: dlock-test-servers, N redis-servers for a shell script.
 *
 *   dlock-test-servers N
 *
 * Starts N redis-server processes on free 127.0.0.1 ports through the support library
 * (so a script needs no server launcher of its own), prints one line per server,
 * "node I PORT PID", then "ready URL1,URL2,...", and reads commands from its standard
 * input, one per line, answering each with one line:
 *   kill I      SIGKILL server I (1-based)           -> "killed I"
 *   restart I   start it again, empty, on its port   -> "node I PORT PID"
 *   quit        (or the end of the input) stop them all and exit 0.
 * A failure answers "error MESSAGE" (details on stderr). SIGINT, SIGTERM and SIGHUP
 * kill the servers before the program dies of the signal; SIGKILL takes them with it
 * (PR_SET_PDEATHSIG). The servers' directories are made under $DLOCK_TEST_TMP or /tmp.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERVERS 16

static void print_node(const dh_server *s, int i)
{
    printf("node %d %d %d\n", i + 1, s->port, (int)s->pid);
}

/* Carry out one command line on the servers; false on "quit". */
static bool command(dh_server *srv, int n, const char *line)
{
    char verb[16];
    int i = 0;
    int k = sscanf(line, "%15s %d", verb, &i);
    if (k >= 1 && strcmp(verb, "quit") == 0)
        return false;
    if (k != 2 || i < 1 || i > n) {
        printf("error bad command: %s", line);
        return true;
    }
    dh_server *s = &srv[i - 1];
    if (strcmp(verb, "kill") == 0) {
        dh_server_kill(s);
        printf("killed %d\n", i);
    } else if (strcmp(verb, "restart") == 0) {
        if (dh_server_restart(s) == 0)
            print_node(s, i - 1);
        else
            printf("error server %d did not restart\n", i);
    } else {
        printf("error unknown command: %s\n", verb);
    }
    return true;
}

int main(int argc, char **argv)
{
    int n = argc == 2 ? atoi(argv[1]) : 0;
    if (n < 1 || n > MAX_SERVERS) {
        fprintf(stderr, "usage: dlock-test-servers N (1..%d)\n", MAX_SERVERS);
        return 64;
    }
    dh_servers_die_with_signals(NULL);
    /* A script reads each answer as soon as it is written. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    dh_server srv[MAX_SERVERS];
    if (dh_servers_start(srv, n, NULL) != 0) {
        printf("error the servers did not start\n");
        return 69;
    }
    char urls[MAX_SERVERS * 130] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        print_node(&srv[i], i);
        used += (size_t)snprintf(urls + used, sizeof urls - used, "%s%s", i ? "," : "", srv[i].url);
    }
    printf("ready %s\n", urls);
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL && command(srv, n, line))
        ;
    dh_servers_stop(srv, n);
    return 0;
}
