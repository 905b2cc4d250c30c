/*
 * signals.c: signals by name, as kill(1) knows them: parsing `dlock run -k SIGNAL`,
 * and naming a signal in a message ("canceled by SIGINT", "sending SIGUSR1 to CMD").
 *
 * Names are matched without regard to case, with or without "SIG", and real-time
 * signals are counted from either end of their range (RTMIN+2, RTMAX-1), so that
 * what works with kill(1) works here.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SIGSTKFLT, SIGPWR, SIGPOLL */
#endif

#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The names kill(1) knows. Where two share a number (ABRT and IOT, IO and POLL), the
 * first one in the table is the one messages use. */
static const struct signame {
    const char *name;
    int signo;
} signames[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},     {"IOT", SIGIOT},   {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CHLD", SIGCHLD},     {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},         {"POLL", SIGPOLL},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

/* "SIGTERM" for messages; "signal 40" for those without a name here. */
const char *cli_signal_label(int signo, char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].signo == signo) {
            snprintf(buf, len, "SIG%s", signames[i].name);
            return buf;
        }
    snprintf(buf, len, "signal %d", signo);
    return buf;
}

/* A decimal number of at most 3 digits, the whole of s. -1 if not. */
static int small_number(const char *s)
{
    int v = 0, n = 0;
    for (; s[n] >= '0' && s[n] <= '9'; n++) {
        if (n == 3)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    return n > 0 && s[n] == '\0' ? v : -1;
}

/* -k: a number (1 to SIGRTMAX), or a name as kill(1) knows it, with or without
 * "SIG", in any case: TERM, sigterm, SIGUSR1, RTMIN+2, RTMAX-1. */
int cli_parse_signal(const char *s, int *signo)
{
    int n = small_number(s);
    if (n >= 0) {
        if (n < 1 || n > SIGRTMAX)
            return -1;
        *signo = n;
        return 0;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (strcasecmp(s, signames[i].name) == 0) {
            *signo = signames[i].signo;
            return 0;
        }
    /* Real-time signals are numbered from either end of their range. */
    int base = strncasecmp(s, "RTMIN", 5) == 0   ? SIGRTMIN
               : strncasecmp(s, "RTMAX", 5) == 0 ? SIGRTMAX
                                                 : 0;
    if (base == 0)
        return -1;
    s += 5;
    int off = 0;
    if (*s != '\0') {
        bool plus = base == SIGRTMIN;
        if (*s != (plus ? '+' : '-') || (off = small_number(s + 1)) < 0)
            return -1;
        off = plus ? off : -off;
    }
    if (base + off < SIGRTMIN || base + off > SIGRTMAX)
        return -1;
    *signo = base + off;
    return 0;
}
