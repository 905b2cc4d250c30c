/*
 * scripts.h: the scripts layer of src/ (internal.h's map): the Lua the servers run,
 * each script's SHA1, a call formatted as EVALSHA with its EVAL fallback, and the keys
 * of a name. It knows the transport (a call becomes a node's request) and nothing
 * above it: which script a lock operation runs, and what its reply means, is decided
 * by the layers above.
 */
#ifndef DLOCK_SCRIPTS_H
#define DLOCK_SCRIPTS_H

#include "transport.h"

/* ---- scripts.c, script_call.c ----------------------------------------------- */

enum dlock__script_id {
    DLOCK_SCRIPT_ACQUIRE,
    DLOCK_SCRIPT_TRY, /* ACQUIRE's plain try, not fair */
    DLOCK_SCRIPT_RELEASE,
    DLOCK_SCRIPT_EXTEND,
    DLOCK_SCRIPT_INSPECT,
    DLOCK_SCRIPT_FENCE,
    DLOCK_SCRIPT_FENCED_SET,
    DLOCK_SCRIPT_LEAVE,
    DLOCK_SCRIPT_RENEW,
    DLOCK_SCRIPT_REFRESH,
    DLOCK_SCRIPT_ACQUIRE_SHARED,
    DLOCK_SCRIPT_BREAK,
    DLOCK_SCRIPT_BREAK_RECORD,
    DLOCK_SCRIPT_FENCE_RAISE,
    /* a scheduled job's slots, whose bodies live in scripts_records.c */
    DLOCK_SCRIPT_SLOT_READ,
    DLOCK_SCRIPT_SLOT_CLAIM,
    /* leader election's, whose bodies live in scripts_records.c */
    DLOCK_SCRIPT_PROCLAIM,
    DLOCK_SCRIPT_LEADER,
    DLOCK_SCRIPT_CONFIRM, /* a lock taken on its grant's message: our own lease */
    /* the stock's, whose bodies live in stock_scripts.c (it says why) */
    DLOCK_SCRIPT_STOCK_UPDATE,
    DLOCK_SCRIPT_STOCK_RESERVE,
    DLOCK_SCRIPT_STOCK_END,
    DLOCK_SCRIPT_COUNT
};

typedef struct dlock__scripts {
    char sha[DLOCK_SCRIPT_COUNT][41];
} dlock__scripts;

/* Script id's parts, a NULL-terminated list: script_call.c joins them into its body. */
const char *const *dlock__script_parts(int id);
/* The SHA1 of every script into s (script_call.c, as are the dlock__call functions). */
int dlock__scripts_init(dlock__scripts *s, dlock__err *e);

/* ---- keys.c ------------------------------------------------------------------ */

/* The keys of one name, in one allocation (free buf): P{name}, P{name}:fence,
 * P{name}:queue, P{name}:holders, P{name}:holders:info and P{name}:break, the layout
 * keys.c describes. The lock key comes first in buf, so buf alone is the NUL-terminated
 * lock key, and the others follow it in that order, each after the NUL of the one
 * before. */
typedef struct dlock__keys {
    char *buf;
    const char *lock, *fence, *queue, *holders, *info, *brk, *slot, *leader;
    size_t lock_len, fence_len, queue_len, holders_len, info_len, brk_len, slot_len, leader_len;
} dlock__keys;

int dlock__keys_make(const char *prefix, size_t prefix_len, const char *name, size_t name_len,
                     dlock__keys *k, dlock__err *e);
/* A name as written inside the braces of its keys' hash tag (keys.c: as it is, or
 * in hex when it begins with '}' or '%'): its length, and the bytes written at out
 * (returns the end; no NUL). The stock's keys use it for SKUs. */
size_t dlock__tag_len(const char *name, size_t name_len);
char *dlock__tag_write(char *out, const char *name, size_t name_len);
/* The first five keys in layout order at args[0..5), their lengths at lens[0..5): the
 * KEYS of the scripts that take them all (ACQUIRE, ACQUIRE_SHARED, RELEASE). */
#define DLOCK_KEYS_ALL 5
void dlock__keys_all(const dlock__keys *k, const char **args, size_t *lens);

/* A formatted script call: EVALSHA, and the EVAL fallback. Free with _free. */
typedef struct dlock__call {
    char *evalsha;
    int evalsha_len;
    char *eval; /* formatted by dlock__call_eval, only when needed */
    int eval_len;
    /* What the EVAL form is made of: borrowed from the caller, valid as long as the
     * call is in use (the caller formats eagerly if its arguments go first). */
    enum dlock__script_id id;
    int nkeys, nargs;
    const char *const *args;
    const size_t *lens;
    /* The slot of its keys (a cluster node routes by it), taken when formatted: all of
     * a call's keys share one hash tag (scripts.c), so the first key's is the call's. */
    bool keyed;
    uint16_t slot;
} dlock__call;

/* The whole text of a script (its EVAL form's body). */
const char *dlock__script_body(enum dlock__script_id id);

int dlock__call_format(const dlock__scripts *s, enum dlock__script_id id, int nkeys, int nargs,
                       const char *const *args, const size_t *lens, dlock__call *out,
                       dlock__err *e);
void dlock__call_free(dlock__call *call);
/* Format the EVAL form (the script itself), if not done yet: for a -NOSCRIPT reply, or
 * for a command nobody will read the reply of. DLOCK_ERR_NOMEM, with no message (the
 * caller says where it happened). */
int dlock__call_eval(dlock__call *call);
/* Make the EVAL form the command itself (dlock__call_eval, then what dlock__call_reqs
 * sends): for a call whose reply is read only later, too late to resend it on a
 * -NOSCRIPT. DLOCK_ERR_NOMEM as dlock__call_eval. */
int dlock__call_as_eval(dlock__call *call);
/* Point reqs[0..n) at call, awaited or not, resent as EVAL on -NOSCRIPT. */
void dlock__call_reqs(dlock__call *call, dlock__req *reqs, int n, bool await);
/* Give r the slot of call's keys (a cluster node routes by it). */
void dlock__call_slot(const dlock__call *call, dlock__req *r);

/* ---- scripts_queue.c, scripts_records.c, stock_scripts.c: scripts.c's table --- */

/* scripts_queue.c: the wait queue's Lua functions join(queue, ticket, member, qttl) and
 * dispatch(...), parts of the scripts that take, give up and release, and the
 * scripts REFRESH and CONFIRM. */
extern const char dlock__join_lua[];
extern const char dlock__dispatch_lua[];
extern const char *const dlock__refresh_lua[];
extern const char *const dlock__confirm_lua[];

/* Each a NULL-terminated list of parts, as scripts.c's own (joined in script_call.c). */
extern const char *const dlock__slot_read_lua[];
extern const char *const dlock__slot_claim_lua[];
extern const char *const dlock__fenced_set_lua[];
extern const char *const dlock__fence_raise_lua[];
extern const char *const dlock__proclaim_lua[];
extern const char *const dlock__leader_lua[];
/* The Lua function retire(record, token) that RELEASE and BREAK run on a leader's lock:
 * its record deleted, and "no one leads" published to its observers (elect.c). */
extern const char dlock__retire_lua[];
extern const char *const dlock__stock_update_lua[];
extern const char *const dlock__stock_reserve_lua[];
extern const char *const dlock__stock_end_lua[];
/* The listing's page script, sent whole by EVAL (scripts_list.c). */
extern const char dlock__list_lua[];

#endif /* DLOCK_SCRIPTS_H */
