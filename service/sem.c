/*
 * sem.c: SEM ACQUIRE and SEM RELEASE, named after `dlock sem acquire` and `dlock sem
 * release`.
 *
 *   SEM ACQUIRE name K [TTL ms] [WAIT ms] [DETACHED] [FAIR] [LABEL text] [MAXHOLD ms]
 *   SEM RELEASE name token
 *
 * A permit is a lock like any other (dlock_sem_acquire): SEM ACQUIRE is LOCK's
 * acquisition in steps, started with dlock_sem_acquire_start (locks.c runs it and
 * parks it the same way), and answers as LOCK does. Without DETACHED the permit is a
 * session lock: renewed while the connection is open, released when it closes. SEM
 * RELEASE is UNLOCK, and UNLOCK and EXTEND work on a permit too.
 *
 * A connection may hold several permits of one name (each known by its token). One
 * that waits for a permit only it could give back would wait for itself, its own
 * permits renewed all the while: SEM ACQUIRE is refused at once when the connection
 * holds the name exclusively, or as many of the name's shared holders (its permits,
 * its LOCK SHAREDs) as K admits.
 */
#include "dlockd.h"

#include <string.h>

#define ACQUIRE_SYNTAX                                                                             \
    "SEM ACQUIRE name K [TTL ms] [WAIT ms] [DETACHED] [FAIR] [LABEL text] [MAXHOLD ms]"

/* argv[0] is ACQUIRE. */
static void sem_acquire(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    int64_t permits;
    if (!dd_arg_int(&argv[2], 1, DLOCK_PERMITS_MAX, &permits)) {
        dd_reply_error(out, "ERR K (permits) must be an integer from 1 to %d", DLOCK_PERMITS_MAX);
        return;
    }
    if (dd_would_wait_for_itself(c, &argv[1], permits, out))
        return;
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    a->permits = permits;
    a->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    if (!dd_lock_options(argv, argc, 3, "SEM ACQUIRE", a, out) ||
        (a->name = dd_arg_dup(&argv[1], "semaphore name", DLOCK_NAME_MAX, out)) == NULL ||
        !dd_lock_start(c, j, out))
        dd_job_free(j);
}

static void dd_cmd_sem(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_arg_is(&argv[1], "ACQUIRE")) {
        if (argc < 4) {
            dd_reply_error(out,
                           "ERR wrong number of arguments for 'SEM ACQUIRE' (" ACQUIRE_SYNTAX ")");
            return;
        }
        sem_acquire(c, argv + 1, argc - 1, out);
    } else if (dd_arg_is(&argv[1], "RELEASE")) {
        if (argc != 4) {
            dd_reply_error(out, "ERR wrong number of arguments for 'SEM RELEASE' (SEM RELEASE "
                                "name token)");
            return;
        }
        dd_unlock(c, &argv[2], &argv[3], "semaphore name", out);
    } else {
        dd_reply_error(out, "ERR unknown SEM subcommand '%.*s' (ACQUIRE, RELEASE)",
                       (int)(argv[1].len > 64 ? 64 : argv[1].len), argv[1].p);
    }
}

void dd_sem_register(void)
{
    static const dd_command_def sem = {"sem", -2, false, false, false, dd_cmd_sem};
    dd_commands_add(&sem, 1);
}
