/*
 * recovery.pml: a Promela model of ntp's live-recovery protocol (DESIGN.md 2.3/2.4,
 * docs/recovery.md, docs/design/recovery-model.md), checked by spin in CI
 * (models/recovery/check.sh, CTest label `model`).
 *
 * Actors
 *   worker[N]   one process per worker: training, the fault path, the agreement, the
 *               re-formation, fencing (proctype worker, labels below).
 *   faults      crashes (the launcher's exit notice appears with them), stalls forever
 *               (progress still, the process lives but never moves again) and pauses (a stall
 *               that ends: SIGSTOP/SIGCONT, a healed partition), at most F in a run, never
 *               all workers.
 *   the store   global arrays below, each statement on them atomic (linearizable).
 *
 * Compile-time switches (spin -D...):
 *   BUGGY_COMMIT   the old rollback: the state is restored at the start of the reshard but
 *                  `committed` is lowered only when the re-formation ends (must fail prop. 2).
 *   STRICT_FENCE   the strict form of prop. 4: a worker that some later published list left out
 *                  never applies an update (fails: a paused member's all-reduce can still
 *                  complete after it woke; see the design note).
 *   KEEP_DONE      the literal reading of "switches to prev": done_epoch is kept when a member
 *                  switches to prev (fails prop. 3 with 3 faults; the model lowers it by
 *                  default, see the design note).
 *   NO_PAUSE       no pauses (crashes and stalls forever only).
 *
 * State abstraction: a worker's model state is `st`, a bitmask of the step updates applied
 * (bit s = update of step s; a second application of an applied update sets DUP), and `sl`,
 * the epoch whose layout the state is in (a reshard moves it to the new epoch's layout).
 */

#ifndef N
#define N 3            /* workers */
#endif
#ifndef F
#define F 2            /* faults in a run (crash, stall or pause), never all workers */
#endif
#ifndef STEPS
#define STEPS 3        /* training steps to finish */
#endif
#ifndef PMAX
#define PMAX F         /* pauses among the faults */
#endif
#ifndef EMAX
#define EMAX 8         /* epochs 0..EMAX-1; asserted never exceeded */
#endif

#define NONE 255
#define DUP 128
#define ALL ((1 << N) - 1)
#define BIT(w) (1 << (w))
#define FULL ((1 << STEPS) - 1)
#define PREFIX(c) ((1 << (c)) - 1)

/* ---- faults and the launcher ---- */
byte nfaults;            /* faults injected so far */
byte npause;             /* pauses among them */
byte gone;               /* bitmask: crashed, stalled forever, finished or fenced */
byte bad;                /* bitmask: crashed or stalled forever */
bool crashed[N];         /* crash: the process is gone */
bool stuck[N];           /* stall forever: the process lives, never moves again */
bool paused[N];          /* stall that may end (SIGSTOP ... SIGCONT) */
bool exitn[N];           /* the launcher's exit notice (a crash; not a clean exit) */
bool still[N];           /* a watch recorded the progress still and it has not moved since */
bool finished[N];
bool fenced[N];

/* Known dead: a crash (exit notice) or a stall (progress still). */
#define DEAD(w) (exitn[w] || still[w])
/* Will never announce: known dead, finished or fenced (it wrote that it is done or left: see
 * the design note, "finishing"; such a worker does not abort its peers' collectives). */
#define GONE(w) (DEAD(w) || finished[w] || fenced[w])

/* ---- the store, per epoch t ---- */
byte annm[EMAX];         /* announce[t][w] present: bitmask of w */
byte annc[EMAX];         /* min committed over announce[t][*] (the decider reads all of them) */
byte annd[EMAX];         /* min done_epoch over announce[t][*] */
byte dec[EMAX];          /* who drew ticket[t] == 1 (the decider of t); NONE: not drawn */
bool pub[EMAX];          /* list[t] published */
byte mem[EMAX];          /* list[t].members (bitmask) */
byte agreed[EMAX];       /* list[t].agreed_step */
byte base[EMAX];         /* list[t].base_epoch */
bool fail[EMAX];         /* fail[t]: the failure notice */

/* ---- the communicators of epoch t (their state lives with the peers, not the store) ---- */
byte arin[EMAX * N];     /* arin[t*N+w] = s+1: w entered the world all-reduce of step s in t */
byte rvin[EMAX];         /* rendezvous of t: bitmask of arrived members */
byte rsin[EMAX];         /* reshard of t: bitmask of members that entered it */
byte start[EMAX];        /* prop. 3: the committed step epoch t's training started from */
byte final_st = NONE;    /* prop. 3: the state of the first worker that finished */

/* Every member of t is in the operation (bitmask `in` covers mem[t]). */
#define ALLIN(in, t) (((in) & mem[t]) == mem[t])

/* The watch, or a failed collective: fail[t], or a member of t known dead. */
#define ABORT(t) (fail[t] || \
  ((mem[t] & BIT(0)) && DEAD(0)) || ((mem[t] & BIT(1)) && DEAD(1)) || \
  (N > 2 && (mem[t] & BIT(2 % N)) && DEAD(2 % N)) || \
  (N > 3 && (mem[t] & BIT(3 % N)) && DEAD(3 % N)))

/* The decider of t may publish: every candidate (member of its current epoch e) announced t or
 * is known dead. */
#define CAND_OK(w, t, e) (!(mem[e] & BIT(w)) || (annm[t] & BIT(w)) || GONE(w))
#define DECIDE_OK(t, e) (CAND_OK(0, t, e) && CAND_OK(1, t, e) && \
  (N <= 2 || CAND_OK(2 % N, t, e)) && (N <= 3 || CAND_OK(3 % N, t, e)))

/* Properties 1..4 (0: the model's own bound) as assertions at the points where the protocol
 * relies on them; the number shows in pan's message, "assertion violated ((2==2)&&...)". */
#define PROP(n, x) assert(((n) == (n)) && (x))

/* Prop. 2: the held state is exactly updates 0..committed-1, each once. Checked wherever the
 * state or the claimed step is used or published: an announcement, entering a step's
 * all-reduce, applying an update, finishing. (2b, the layout: checked where it is used, at the
 * reshard: every member holds the base epoch's layout.) */
#define HELD_OK() PROP(2, st == PREFIX(c))

/* Prop. 4: a worker that announced t and found list[t] published without it (it is fenced)
 * never writes as a member again: no announcement, no update. */
inline fence_check() {
  i = 0;
  do
  :: i < EMAX ->
     PROP(4, !((annm[i] & BIT(me)) && pub[i] && !(mem[i] & BIT(me))));
     i++
  :: else -> i = 0; break
  od
}

inline strict_fence_check() {
#ifdef STRICT_FENCE
  i = e + 1;
  do
  :: i < EMAX -> PROP(4, !(pub[i] && !(mem[i] & BIT(me)))); i++
  :: else -> i = 0; break
  od;
#endif
  skip
}

/* ---- the worker's steps, each one atomic step of the model (see "Reduction" in the design
 * note: every step ends with the worker's next visible write, local work before it) ---- */

/* Enter the world all-reduce of step c in epoch e (props. 2 and 3: members start alike). */
inline enter_allreduce() {
  HELD_OK();
  PROP(3, sl == e && de == e);       /* members train on their epoch's layout */
  if
  :: start[e] == NONE -> start[e] = c
  :: else -> PROP(3, !first || start[e] == c)   /* members start from the same step */
  fi;
  arin[e * N + me] = c + 1
}

/* announce[t][me] = {committed, done_epoch}, then draw ticket[t] (ticket 1: the decider of t). */
inline announce() {
  printf("w%d announce t=%d c=%d de=%d st=%d ticket1=%d\n", me, t, c, de, st, dec[t] == NONE);
  PROP(0, t < EMAX);             /* the model's epoch bound */
  HELD_OK();
  fence_check();
  annm[t] = annm[t] | BIT(me);
  if :: c < annc[t] -> annc[t] = c :: else -> skip fi;
  if :: de < annd[t] -> annd[t] = de :: else -> skip fi;
  if :: dec[t] == NONE -> dec[t] = me :: else -> skip fi
}

/* list[t] received with itself a member: epoch := t, roll back, switch to prev; then arrive at
 * the rendezvous of t (build communicators). */
inline receive_and_arrive() {
  e = t;
  first = true;
  /* Roll back the update the others did not apply: state and committed together. */
  if
  :: c > agreed[t] ->
#ifdef BUGGY_COMMIT
     lower = true                 /* the old code: the state is restored at the reshard */
#else
     st = ust; sl = usl; c = uc
#endif
  :: else -> skip
  fi;
#ifndef BUGGY_COMMIT
  PROP(2, c == agreed[t]);       /* one undo suffices: members are at most one step apart */
  /* undo is dead until the next update overwrites it: cleared (a smaller state space; were
   * it ever needed again, prop. 2 would fail on the cleared value) */
  ust = 0; usl = 0; uc = 0;
#endif
  /* A member ahead of base_epoch switches to prev, the state of the base epoch. */
  if
  :: de > base[t] ->
     PROP(3, hp && pc == c && psl == base[t]);
     st = pst; sl = psl;
#ifndef KEEP_DONE
     de = base[t]                 /* it now holds the base epoch's state (design note) */
#endif
  :: else -> skip
  fi;
  rvin[t] = rvin[t] | BIT(me);
  printf("w%d received list[%d]: c=%d st=%d sl=%d de=%d\n", me, t, c, st, sl, de)
}

proctype worker(byte me) provided (!paused[_pid - 1])   /* pid 1..N is worker 0..N-1 */
{
  byte e = 0;            /* epoch: the last epoch whose member list it received */
  byte de = 0;           /* done_epoch: the last epoch whose re-formation it completed */
  byte c = 0;            /* committed: the step count its held state is at */
  byte st = 0;           /* state: bitmask of the updates applied (DUP: one applied twice) */
  byte sl = 0;           /* the epoch whose layout st is in */
  byte ust = 0, usl = 0, uc = 0;   /* undo: the state before its last update */
  bool hp = false;       /* prev held */
  byte pst = 0, psl = 0, pc = 0;   /* prev: retained state of its previous completed epoch */
  bool first = false;    /* no all-reduce of this epoch completed yet (prev still needed) */
  byte t = 0;            /* the agreement's target epoch */
  byte i = 0;
#ifdef BUGGY_COMMIT
  bool lower = false;    /* the old code: committed still to be lowered at the end */
#endif

  {
    atomic { enter_allreduce() };
/* ===== Training in epoch e: step s = committed ===================================== */
train:
    do
    :: atomic {
         /* The all-reduce of step c completes for this member once every member of e entered
          * it (completing here says nothing of the others). */
         (arin[e * N + 0] > c || !(mem[e] & BIT(0))) &&
         (arin[e * N + 1] > c || !(mem[e] & BIT(1))) &&
         (N <= 2 || arin[e * N + (2 % N)] > c || !(mem[e] & BIT(2 % N))) &&
         (N <= 3 || arin[e * N + (3 % N)] > c || !(mem[e] & BIT(3 % N))) ->
         /* Every member completed the re-formation of e: drop prev. */
         if
         :: first -> first = false; hp = false; pst = 0; psl = 0; pc = 0
         :: else -> skip
         fi;
         /* Apply update c together with saving undo. */
apply:   HELD_OK();
         PROP(4, mem[e] & BIT(me));
         fence_check();
         strict_fence_check();
         printf("w%d applies update %d in epoch %d\n", me, c, e);
         ust = st; usl = sl; uc = c;
         if
         :: st & BIT(c) -> st = st | DUP
         :: else -> st = st | BIT(c)
         fi;
         c++;
         if
         :: c == STEPS ->
            /* Finished all STEPS (prop. 3: every finisher holds the same state). */
finish:     printf("w%d finished st=%d\n", me, st);
            HELD_OK();
            if
            :: final_st == NONE -> final_st = st
            :: else -> PROP(3, final_st == st)
            fi;
            PROP(3, st == FULL);
            finished[me] = true; gone = gone | BIT(me);   /* exits 0: no exit notice */
            goto end_worker
         :: else -> enter_allreduce()
         fi
       }
    :: atomic {
         /* Fault path: a peer crashed or stalled (the all-reduce cannot complete), or the
          * watch saw fail[e] or an exit notice: write fail[e], agree on t = e + 1 (e is the
          * highest epoch whose list it received). */
         ABORT(e) ->
fault:   printf("w%d step %d failed in epoch %d\n", me, c, e);
         fail[e] = true;
         t = e + 1;
         announce()
       };
       goto wait
    od;

/* ===== Agreement of t (announced and drew its ticket) ================================= */
wait:
    if
    :: atomic {
         /* Decider: once every candidate (the members of its current epoch e) announced or
          * is known dead, publish list[t] = {the announced, min committed, min done_epoch}.
          * list[t] is written only here, by the one holder of ticket 1. */
         dec[t] == me && DECIDE_OK(t, e) ->
decide:  PROP(1, !pub[t]);                /* prop. 1: one member list per epoch */
         pub[t] = true;
         mem[t] = annm[t];
         agreed[t] = annc[t];
         base[t] = annd[t];
         printf("w%d publish list[%d] mem=%d agreed=%d base=%d\n", me, t, mem[t], agreed[t], base[t]);
         receive_and_arrive()
       }
    :: atomic {
         /* Waiter: list[t] received. */
         dec[t] != me && pub[t] ->
         if
         :: !(mem[t] & BIT(me)) ->
            /* Announced too late: fenced. Leaves the job, never writes as a member. */
fenced_exit: printf("w%d fenced at list[%d]\n", me, t);
            fenced[me] = true; gone = gone | BIT(me);   /* exits 0: no exit notice */
            goto end_worker
         :: else -> receive_and_arrive()
         fi
       }
    :: atomic {
         /* Waiter: the decider is known dead and list[t] (re-checked) is not published:
          * write fail[t], agree on t + 1. */
         dec[t] != me && !pub[t] && DEAD(dec[t]) ->
         printf("w%d: decider w%d of %d known dead\n", me, dec[t], t);
         fail[t] = true;
         t++;
         announce()
       };
       goto wait
    fi;
/* ===== Re-formation of t ============================================================== */
/* Rendezvous (build communicators): completes once every member of t arrived; aborted by
 * fail[t], a member's exit notice, or the watch (a member's progress still). */
rendezvous:
    if
    :: atomic {
         ALLIN(rvin[t], t) ->
#ifdef BUGGY_COMMIT
         if :: lower -> st = ust; sl = usl :: else -> skip fi;   /* the old rollback */
#endif
         /* Reshard: a collective among the members of t, from the base epoch's layout. */
reshard: PROP(3, sl == base[t]);          /* every member holds the base layout */
         rsin[t] = rsin[t] | BIT(me);
         printf("w%d rendezvous %d done, enters reshard\n", me, t);
       }
    :: atomic {
         ABORT(t) -> printf("w%d rendezvous of %d failed\n", me, t);
         fail[t] = true; t++; announce()
       };
       goto wait
    fi;
    if
    :: atomic {
         /* The reshard completes for this member (it may fail on others). */
         ALLIN(rsin[t], t) ->
reformed:
#ifdef BUGGY_COMMIT
         if :: lower -> c = uc; lower = false :: else -> skip fi;
         ust = 0; usl = 0; uc = 0;
#endif
         /* prev := the base state, done_epoch := t, continue training. */
         printf("w%d re-formed epoch %d at step %d\n", me, t, c);
         hp = true; pst = st; psl = sl; pc = c;
         sl = t; de = t;
         enter_allreduce()
       };
       goto train
    :: atomic {
         /* Any failure inside the re-formation: write fail[t], agree on t + 1. */
         ABORT(t) ->
reform_failed:
         printf("w%d reshard of %d failed\n", me, t);
         fail[t] = true; t++; announce()
       };
       goto wait
    fi
  } unless {
    /* A crash or a stall forever, at any point: the process never moves again. */
    crashed[me] || stuck[me]
  };
end_worker:
  skip
}

/* Faults: a crash, a stall forever, or a pause of a running worker, at most F, never all. */
/* w may take a fault: running (not gone, not paused), and not the last worker standing. */
#define CAN(w) (nfaults < F && !(gone & BIT(w)) && !paused[w] && (bad | BIT(w)) != ALL)

proctype faults()
{
  byte w;
end_faults:
  do
  :: atomic {
       /* pick a running worker */
       if
       :: CAN(0) -> w = 0
       :: CAN(1) -> w = 1
       :: N > 2 && CAN(2 % N) -> w = 2 % N
       :: N > 3 && CAN(3 % N) -> w = 3 % N
       fi;
       nfaults++;
       if
       :: crashed[w] = true; exitn[w] = true; gone = gone | BIT(w); bad = bad | BIT(w);
          printf("FAULT: w%d crashes (exit notice)\n", w)
#ifndef NO_STUCK
       :: stuck[w] = true; still[w] = true; gone = gone | BIT(w); bad = bad | BIT(w);
          printf("FAULT: w%d stalls forever (progress still)\n", w)
#endif
#ifndef NO_PAUSE
       :: npause < PMAX -> npause++; paused[w] = true; still[w] = true;
          printf("FAULT: w%d pauses (progress still)\n", w)
#endif
       fi;
       w = 0
     }
  :: atomic {
       /* a paused worker moves again (its watchers see the progress move) */
       if
       :: paused[0] -> paused[0] = false; still[0] = false; printf("FAULT: w%d moves again\n", 0)
       :: paused[1] -> paused[1] = false; still[1] = false; printf("FAULT: w%d moves again\n", 1)
       :: N > 2 && paused[2 % N] -> paused[2 % N] = false; still[2 % N] = false; printf("FAULT: w%d moves again\n", 2 % N)
       :: N > 3 && paused[3 % N] -> paused[3 % N] = false; still[3 % N] = false; printf("FAULT: w%d moves again\n", 3 % N)
       fi
     }
  od
}

init
{
  /* Epoch 0 is formed: every worker is a member, at step 0, layout 0. */
  byte k;
  atomic {
    k = 0;
    do
    :: k < EMAX ->
       annc[k] = NONE; annd[k] = NONE; dec[k] = NONE; start[k] = NONE; k++
    :: else -> break
    od;
    pub[0] = true; mem[0] = ALL; agreed[0] = 0; base[0] = 0; k = 0;
    k = 0;
    do
    :: k < N -> run worker(k); k++
    :: else -> break
    od;
    k = 0;
    run faults()
  }
}

/* Progress: every worker that did not crash or stall forever finishes or is fenced. */
#define ALLDONE ((gone == ALL))
ltl progress { <> ALLDONE }
