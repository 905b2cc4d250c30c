/*
 * fork.c: telling, without a system call, that this process is a forked child of the
 * one that made some piece of state.
 *
 * After fork() a child shares its parent's sockets, and a copy of every handle: a
 * byte the child writes on a socket corrupts the parent's stream, and random bytes
 * pooled before the fork would repeat in both processes. Clients and the token pool
 * record the generation below when they are made, and compare it on every call;
 * getpid() on every call would cost a system call (and be fooled by pid reuse).
 */
#include "base.h"

#include <stdatomic.h>
#include <unistd.h>

/* Fork detection without a system call per call (getpid is one, and every lock call
 * checks). Written only in a forked child while it has one thread (the atfork child
 * handler), read by every thread: relaxed atomics keep that defined. */
static _Atomic uint64_t fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed);
}

/* glibc removes the handler when a dlopen'ed libdlock is unloaded (it is registered
 * with the library's __dso_handle). If it cannot be registered (ENOMEM), every value
 * read later is suspect: the generation is then made to differ on every call, and
 * the token pool is refilled on every call and clients fall back to comparing pids. */
static bool fork_hook_ok;
static void fork_register(void)
{
    fork_hook_ok = pthread_atfork(NULL, NULL, on_fork_child) == 0;
}

uint64_t dlock__fork_gen(void)
{
    pthread_once(&fork_once, fork_register);
    if (!fork_hook_ok)
        return atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed) + 1;
    return atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

bool dlock__forked_since(uint64_t gen, pid_t pid)
{
    uint64_t now = dlock__fork_gen();
    return fork_hook_ok ? gen != now : getpid() != pid;
}
