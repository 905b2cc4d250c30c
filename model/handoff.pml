/*
 * handoff.pml: a waiter that starts its section on the handoff's message, without the
 * confirming round trip (docs/waiting.md, "Starting on the grant"), on one Redis node,
 * searched exhaustively by Spin for small bounds (`make model`).
 *
 * What is modelled
 *   - The node keeps the lock key (a token, and the tick its lease ends), the fence
 *     counter and the wait queue (FIFO). An expired lease frees the key and tells nobody.
 *   - Clients: CLIENTS of them, ATTEMPTS acquisitions each, each acquisition with a token
 *     of its own, made when it starts (tick `made`). An attempt, at the node: a free key
 *     is granted (lease LEASE, the next fence); a key holding our token is confirmed
 *     (our own lease, the next fence); another's refuses us and queues us (again, if a
 *     release popped us meanwhile). An attempt that found the key ours may also come back
 *     too late to use (a slow round): it then gives the lock back, which hands it on to
 *     the queue's head as a release does.
 *   - A release (or a give-back) with waiters queued pops the head, sets the key to its
 *     token with the handoff lease HANDOFF, takes the next fence and publishes token and
 *     fence to the head's client. The message is delivered at any later moment, or never.
 *   - A waiter attempts again at any moment (its lease-end timer, its refresh finding the
 *     lock free or its own, a wake-up). On its grant's message it may start at once,
 *     with validity until made + HANDOFF, if that is still ahead and none of its attempts
 *     gave a grant back; else it attempts. Having started so, its confirmation (our own
 *     lease, token-checked) reaches the node at any later moment, or never; the holder's
 *     validity does not count on it.
 *   - A holder releases at any moment, or never (a crash, a pause for good).
 *
 * What is checked (assertions)
 *   1. Mutual exclusion in validity: when a client starts a section, no other client's
 *      validity has not ended.
 *   2. Fences: a section's fence is larger than every fence of a section that started
 *      before it.
 *   Two variants must each fail, or the model could not have failed:
 *   -DFROM_LAST_SEND  validity counted from the waiter's latest request instead of its
 *                     token's making: a waiter starts on a late message for a grant that
 *                     ran out before that request, after the lock moved on (the search
 *                     finds its fence below that of a section started before it);
 *   -DIGNORE_GIVEBACK a waiter starts on a message for a grant it gave back (its attempt
 *                     found the key its own, too late): the lock went on to the next head.
 *
 * What is abstracted
 *   - Time is ticks; the node's clock is real time, and a round runs within one tick
 *     (the drift allowance and the round's length are what the real validity subtracts
 *     besides). A message's and a confirmation's delays are any number of ticks.
 *   - One node: with N > 1 the argument is the same on each node of a quorum, and the
 *     give-back of a minority is the second variant's case. Shared holders, fair mode and
 *     the heir (whose handoff the release's own reply confirms) are not modelled.
 */

#ifndef CLIENTS
#define CLIENTS 3
#endif
#ifndef ATTEMPTS
#define ATTEMPTS 1
#endif
#ifndef LEASE
#define LEASE 3
#endif
#ifndef HANDOFF
#define HANDOFF 2
#endif
#ifndef TMAX
#define TMAX 6
#endif

byte now;                  /* real time, in ticks */
byte key;                  /* the token holding the lock, 0 when free */
byte until;                /* the tick its lease ends */
short ctr;                 /* the fence counter */
byte queue[CLIENTS];       /* waiting tokens, head first */
byte qlen;
byte owner_of[CLIENTS * ATTEMPTS + 1]; /* token -> client (1-based) */
byte msg_tok[CLIENTS + 1]; /* a message on the way to client c: the token it names */
short msg_fence[CLIENTS + 1];
byte valid_until[CLIENTS + 1]; /* a holder's validity (0: not holding) */
short hi_started;          /* the highest fence of the sections started */

/* Pop the head and hand it the lock with the handoff lease, or free the key. */
inline dispatch()
{
    if
    :: qlen > 0 ->
        key = queue[0];
        until = now + HANDOFF;
        ctr++;
        msg_tok[owner_of[key]] = key;
        msg_fence[owner_of[key]] = ctr;
        queue[0] = queue[1];
        queue[1] = queue[2];
        queue[2] = 0;
        qlen--
    :: else -> key = 0; until = 0
    fi
}

inline enqueue(t)
{
    if
    :: queue[0] != t && queue[1] != t && queue[2] != t -> queue[qlen] = t; qlen++
    :: else -> skip
    fi
}

/* A section starts with fence f: no other validity runs, and fences grow. */
inline start(f, vu)
{
    for (o : 1 .. CLIENTS) {
        assert(o == me || valid_until[o] <= now)
    }
    assert(f > hi_started);
    hi_started = f;
    valid_until[me] = vu
}

proctype client(byte me)
{
    byte tries, tok, made, last_send, vu, o;
    short fence;
    bool held, gave_back, confirm_due;

    do
    :: tries < ATTEMPTS ->
        atomic {
            tries++;
            tok = (me - 1) * ATTEMPTS + tries;
            owner_of[tok] = me;
            made = now;
            gave_back = false;
            held = false
        };
        do
        :: !held ->
            if
            :: atomic {
                   /* an attempt */
                   last_send = now;
                   if
                   :: key == 0 || key == tok ->
                       ctr++;
                       fence = ctr;
                       if
                       :: true ->
                           key = tok;
                           until = now + LEASE;
                           start(fence, now + LEASE);
                           held = true
                       :: key == tok && !gave_back ->
                           /* found ours, but too late to use: given back, and still
                            * queued (once an acquisition, which bounds the search) */
                           dispatch();
                           enqueue(tok);
                           gave_back = true
                       fi
                   :: else -> enqueue(tok)
                   fi
               }
            :: atomic {
                   /* the grant's message */
                   msg_tok[me] == tok ->
                   msg_tok[me] = 0;
#ifdef FROM_LAST_SEND
                   vu = last_send + HANDOFF;
#else
                   vu = made + HANDOFF;
#endif
#ifdef IGNORE_GIVEBACK
                   gave_back = false;
#endif
                   if
                   :: vu > now && !gave_back ->
                       fence = msg_fence[me];
                       start(fence, vu);
                       held = true;
                       confirm_due = true
                   :: else -> skip /* it attempts instead */
                   fi
               }
            fi
        :: held -> break
        od;
        /* holding: the confirmation may land, then the release, or never */
        if
        :: atomic {
               confirm_due ->
               if
               :: key == tok -> until = now + LEASE
               :: else -> skip
               fi;
               confirm_due = false
           }
        :: true -> skip
        fi;
        if
        :: atomic {
               if
               :: key == tok -> dispatch()
               :: else -> skip
               fi;
               valid_until[me] = 0;
               held = false;
               confirm_due = false
           }
        :: true -> break /* a crash, or a pause for good */
        fi
    :: else -> break
    od
}

/* Real time: the next tick, and a lease that ended with it (which tells nobody). */
active proctype clock()
{
end:
    do
    :: atomic {
           now < TMAX ->
           now++;
           if
           :: key != 0 && now >= until -> key = 0; until = 0
           :: else -> skip
           fi
       }
    od
}

init
{
    byte c;
    atomic {
        for (c : 1 .. CLIENTS) {
            run client(c)
        }
        c = 0
    }
}
