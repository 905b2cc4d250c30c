/*
 * fencing.pml: acquire, release and fences of one lock name on N = 3 Redis nodes in the
 * default fence mode, searched exhaustively by Spin for small bounds (`make model`).
 *
 * What is modelled
 *   - Nodes. Each keeps the lock key (a token, and the tick its lease ends) and the
 *     fence counter. A grant (ACQUIRE on a free key) sets the key with a lease of LEASE
 *     ticks and runs next_fence: counter = max(counter + 1, TIME), TIME being the node's
 *     clock. A node restarts without persistence: it forgets its key and its counter and
 *     is down, answering nothing (requests and releases sent to it meanwhile are lost),
 *     from a moment in one tick until RESTART ticks after that tick began: more than
 *     RESTART - 1 ticks. At most RESTARTS restarts in a run, of any nodes.
 *   - Clocks. Real time is `now`, advanced by the clock process; it only moves forward.
 *     Node i's clock is now + off[i], off[i] in 0..SKEW, fixed for the run (the clocks
 *     differ by up to SKEW ticks and run at the same rate). A restarted node comes back
 *     with its clock moved on by the time it was down.
 *   - Clients: CLIENTS of them, ATTEMPTS acquisitions each. An attempt is a round to the
 *     3 nodes; each request may be lost (timed out), which is also how two rounds split
 *     the nodes between them. The fence is the max of the values the granting nodes
 *     returned. The attempt succeeds when a quorum (N/2 + 1) granted and validity =
 *     LEASE - elapsed - SKEW is positive (the drift a client subtracts covers the clocks'
 *     difference here); a failed attempt gives its keys back (raising nothing) or the
 *     give-back is lost and they expire. A holder writes the resource at any later time,
 *     or never: a pause, after which its lease may have run out and another client may
 *     hold the name. Then it releases: every node that is up raises its counter to the
 *     holder's fence, even where the key is gone, and deletes the key where it is still
 *     the holder's. A client that crashes, or pauses for good, is one that takes no
 *     further step, and the search covers every point where a client stops.
 *   - The resource: a register that accepts a write whose fence is >= the highest it
 *     accepted (dlock_fence_admit's rule).
 *
 * What is checked (assertions)
 *   1. Fences strictly increase in real-time order: an acquisition that began after
 *      another returned has a larger fence (what the fault suite counts as a fence
 *      regression).
 *   2. The register never accepts a holder's write after the write of a holder whose
 *      acquisition began after the first one's returned. The register's rule alone
 *      makes it never accept a lower fence after a higher one; this says that the
 *      order it keeps is the holders' order, so a holder that resumes from a pause is
 *      refused once a later holder wrote. It follows from 1; it is asserted where the
 *      resource sees it.
 *   3. Counter + 1 never reaches the next tick's TIME (the bound below holds).
 *   With -DNO_FLOOR a grant returns counter + 1 only, and a restart lets fences go back:
 *   Spin must find a violation, or the model could not fail and its pass would say
 *   nothing (`make model` fails then).
 *
 * What is abstracted
 *   - Time is a small integer, ticks; a lease is a few ticks, a run at most TMAX. TIME is
 *     read as clock * GRAIN: scripts in one tick read the same TIME (a clock coarser
 *     than Redis's microseconds, which only makes equal values likelier), and GRAIN is
 *     above the number of grants a run makes, so increments never reach the next
 *     tick's value (a name is not granted thousands of times a millisecond).
 *   - A round is one step: its requests run at the nodes together, within one tick.
 *     Requests at different nodes commute with everything else at other nodes; a
 *     request not served is lost and taken never to have run (a script that ran late
 *     would raise a counter and hold a key until its lease ends). The tally comes at
 *     once, so elapsed is 0 and validity LEASE - SKEW. A release is one step too and
 *     reaches every node that is up: a release cut off half-way (the client dies
 *     between two nodes) is not modelled, except through the nodes that are down.
 *   - A restart takes effect at the end of the tick it happens in: the requests that
 *     reached the node after it went down, in that tick, are the lost ones above.
 *   - Restart-aware voting is off (DLOCK_RESTART_OFF, or a client that did not see the
 *     restart): every grant counts. Two holders at once are then possible after a
 *     restart (Redlock's hazard) and mutual exclusion is not asserted; fences must order
 *     the holders all the same.
 *   - Not modelled: the wait queue and the handoff (a confirmed handoff runs next_fence
 *     as a grant does; the handoff itself issues no fence), renewal and extend (a longer
 *     lease), shared holders, strict fence mode, counter retention (an expired counter
 *     is a restart of that one name), clocks that go back or run at different rates,
 *     and the register's value beside its fence.
 *   - The nodes are interchangeable (any may restart or lose a request), so the offsets
 *     are taken in increasing order with node 0's at 0.
 *
 * The default mode's assumptions, as bounds here: SKEW < LEASE (with the validity rule
 * above), and RESTART > SKEW, so that a restart lasts longer than the clocks differ: a
 * node that restarts under a holder must come back with its clock past the fences that
 * holder's quorum handed out. With RESTART <= SKEW Spin finds fences going back even
 * with the floor: a node restarts quickly after granting a holder whose fence came from
 * a node with a faster clock, and the next quorum's nodes all have slower clocks.
 */

#ifndef CLIENTS
#define CLIENTS 3
#endif
#ifndef ATTEMPTS
#define ATTEMPTS 1
#endif
#ifndef LEASE
#define LEASE 4
#endif
#ifndef SKEW
#define SKEW 1
#endif
#ifndef RESTART
#define RESTART 2
#endif
#ifndef RESTARTS
#define RESTARTS 2
#endif
#ifndef TMAX
#define TMAX 4
#endif

#define N 3
#define QUORUM (N / 2 + 1)
#define GRAIN 16 /* TIME units per tick: more than the grants of a run */

#ifdef NO_FLOOR
#define NEXT_FENCE(c, t) ((c) + 1)
#else
#define NEXT_FENCE(c, t) ((c) + 1 > (t) -> (c) + 1 : (t))
#endif

byte now;        /* real time, in ticks */
byte off[N];     /* node i's clock is now + off[i] */
bool up[N];      /* not restarting */
byte back[N];    /* a node down comes back at this tick or later */
byte restarts;   /* restarts so far (bounded) */
byte key[N];     /* the lock key: the token holding it, 0 when free */
byte until[N];   /* the tick its lease ends */
short ctr[N];    /* the fence counter */

short hi_done;   /* the highest fence of the acquisitions that returned */
byte ndone;      /* how many acquisitions returned */
short reg;       /* the register: the highest fence accepted */
byte reg_began;  /* of the accepted writers, the latest ndone seen when one began */

#define BIT(i) (1 << (i))
#define POPCOUNT(m) (((m) & 1) + (((m) >> 1) & 1) + (((m) >> 2) & 1))

/* A round's request at node i: a grant when the node is up and its key free, else
 * a refusal or no answer; a request may also be lost (timed out) at any node. */
inline ask(i)
{
    if
    :: up[i] && key[i] == 0 ->
        key[i] = tok;
        until[i] = now + LEASE;
        ctr[i] = NEXT_FENCE(ctr[i], (now + off[i]) * GRAIN);
        assert(ctr[i] < (now + SKEW + 1) * GRAIN); /* increments stay within a tick */
        if
        :: ctr[i] > fence -> fence = ctr[i]
        :: else -> skip
        fi;
        granted = granted | BIT(i)
    :: true -> skip
    fi
}

/* A release at node i, when it is up: raise the counter to the lock's fence even
 * where the key is gone, and delete the key where it is still ours. */
inline release(i)
{
    if
    :: up[i] ->
        if
        :: ctr[i] < fence -> ctr[i] = fence
        :: else -> skip
        fi;
        if
        :: key[i] == tok -> key[i] = 0; until[i] = 0
        :: else -> skip
        fi
    :: else -> skip
    fi
}

/* A failed attempt's give-back at node i: delete our key, raise nothing. */
inline give_back(i)
{
    if
    :: key[i] == tok -> key[i] = 0; until[i] = 0
    :: else -> skip
    fi
}

#define ACQUIRED (POPCOUNT(granted) >= QUORUM && LEASE - (now - began) - SKEW > 0)

/* A client's acquisitions. A client that crashes, or pauses for good, is one that
 * takes no further step: every execution where it stops anywhere is searched. */
proctype client(byte me)
{
    byte tries, tok, began, granted, base_n, my_n;
    short fence, base;
    bool held;

    do
    :: tries < ATTEMPTS ->
        /* An attempt: the round (its requests run within this tick, at the nodes in
         * turn), the tally, and for a failed attempt the give-back. */
        atomic {
            tries++;
            tok = me * ATTEMPTS + tries;
            began = now;
            base = hi_done;
            base_n = ndone;
            ask(0);
            ask(1);
            ask(2);
            if
            :: ACQUIRED ->
                assert(fence > base);
                if
                :: fence > hi_done -> hi_done = fence
                :: else -> skip
                fi;
                my_n = ndone;
                ndone++;
                held = true
            :: else ->
                if
                :: give_back(0); give_back(1); give_back(2)
                :: skip /* lost: the keys expire */
                fi;
                held = false;
                tok = 0;
                fence = 0;
                base_n = 0
            fi;
            began = 0;
            granted = 0;
            base = 0
        };
        if
        :: held ->
            /* holding: write the resource, maybe after a pause past the lease */
            if
            :: atomic {
                   true;
                   if
                   :: fence >= reg ->
                       assert(my_n >= reg_began);
                       reg = fence;
                       if
                       :: base_n > reg_began -> reg_began = base_n
                       :: else -> skip
                       fi
                   :: else -> skip /* refused: a later holder wrote */
                   fi
               }
            :: true -> skip
            fi;
            atomic {
                release(0);
                release(1);
                release(2);
                held = false;
                tok = 0;
                fence = 0;
                base_n = 0;
                my_n = 0
            }
        :: else -> skip
        fi
    :: else -> break
    od
}

inline expire(i)
{
    if
    :: key[i] != 0 && now >= until[i] -> key[i] = 0; until[i] = 0
    :: else -> skip
    fi
}

inline come_back(i)
{
    if
    :: !up[i] && now >= back[i] -> up[i] = true; back[i] = 0
    :: else -> skip
    fi
}

/* A restart without persistence, counted from the tick that ends: the node forgets its
 * key and its counter and is down until RESTART ticks after that tick began. */
inline restart(i)
{
    if
    :: up[i] && restarts < RESTARTS ->
        up[i] = false;
        restarts++;
        key[i] = 0;
        until[i] = 0;
        ctr[i] = 0;
        back[i] = now + RESTART
    :: true -> skip
    fi
}

/* Real time: the end of a tick (the nodes that restarted during it), the next tick,
 * the leases that ended with it and the nodes that are back. */
active proctype clock()
{
end:
    do
    :: atomic {
           now < TMAX ->
           restart(0);
           restart(1);
           restart(2);
           now++;
           expire(0);
           expire(1);
           expire(2);
           come_back(0);
           come_back(1);
           come_back(2)
       }
    od
}

init
{
    byte c;
    atomic {
        up[0] = true;
        up[1] = true;
        up[2] = true;
        /* offsets in increasing order, node 0's 0: the nodes are interchangeable */
        off[0] = 0;
        if
        :: off[1] = 0
        :: off[1] = SKEW
        fi;
        if
        :: off[2] = off[1]
        :: off[2] = SKEW
        fi;
        for (c : 1 .. CLIENTS) {
            run client(c)
        }
        c = 0
    }
}
