/*
 * hierarchy.pml: a Promela model of the control plane's domain hierarchy: a leader's takeover
 * inside the global agreement and the relay of the full list into a domain
 * (docs/design/control-plane-hierarchy.md, src/elastic/domain_leader.h), checked by spin in CI
 * (models/hierarchy/check.sh, CTest `hierarchy_model`, label `model`).
 *
 * What it abstracts:
 *   - A domain's own agreement (the flat protocol, checked by models/recovery/recovery.pml) is
 *     one atomic step of the domain process: a new domain epoch whose list leaves out a member
 *     that crashed or is paused (its progress still), or keeps every member when the global
 *     epoch the domain is armed on failed (the leader's relay of a global failure).
 *   - The global agreement (AgreementMachine in domain ids): a leader announces its domain
 *     epoch in the first global epoch after the one it is armed on that has not failed; the
 *     first announcer decides once every domain announced (no domain dies whole here: a domain
 *     of S slots loses at most F < S), or moves on when the epoch fails.
 *   - Every store operation is one atomic statement. A slot checks its domain epoch after each
 *     of them, as a coroutine looks at its state when a reply comes back: a paused slot that
 *     wakes carries out the one operation it was about to send before it sees that its domain
 *     re-formed without it (the window a SIGSTOP leaves a real process).
 *
 * Actors: slot[N] (a GPU: a member of its domain, and the leader when it is its domain list's
 * lowest slot), domain[D] (its re-formations), a fault (F crashes or pauses of any slot at any
 * moment; a pause ends at any later moment), and a monitor that checks the state the system
 * comes to rest in.
 *
 * Properties:
 *   1. (assert) a slot forms on the full list of a published global epoch whose entry for its
 *      domain is its own domain epoch: never on a list agreed for an older domain list.
 *   2. (assert, at rest) agreement: every slot in its domain's current list formed on the same
 *      global epoch, which is published, not failed, and lists every domain at its current
 *      domain epoch. A slot still waiting at rest is a violation too (a lost wake-up).
 *   3. no invalid end state.
 *   4. (assert, at a decision) no update lost: when every slot of the decider's last list took
 *      a step on it (an update needs every slot), that list is complete (every domain's leader
 *      marked it done), so the new list's base is it.
 *   5. (assert, at a formation) the trainer's source rule (elastic::plan_reform): a slot of the
 *      new list's base list holds the base's state, as the job it formed last or as the base
 *      it kept from that job's re-formation.
 *   A leader marks a global epoch done for its domain once every slot of its domain list marked
 *   its domain epoch done, and only then takes its step (HierarchyMember::mark_global_done);
 *   LEADER_NO_WAIT marks at once, and check.sh asserts that spin then finds a counterexample.
 *
 * The model is the protocol as built (DomainLeader, domain_leader.cpp), with crashes and pauses
 * that end. The pauses found three gaps, all from a leader that wakes after its successor took
 * over and carries out the store operation it was about to send (control_plane_sim's
 * leader-hang never wakes, so the simulator could not find them; its --pause-leader-ms now
 * wakes one, and keeps the invariants with the mends). Two are mended in
 * domain_leader.cpp; each switch below restores the behaviour before the mend, and check.sh
 * asserts that spin then finds a counterexample. The third rule is modeled, not built:
 *   RELAY_ONE_KEY        one relay key pair per domain (<domain>/full and <domain>/full_for)
 *                        that every relay overwrites. A woken leader relays its old list over its
 *                        successor's, and a member of the new domain epoch that had not read it
 *                        yet waits forever. Mended: one key per domain epoch (<domain>/full/<e>).
 *   TAKE_ANY_LIST        a leader takes an agreed global list whatever domain epoch it names for
 *                        its domain. A woken leader's late announcement of its old domain list
 *                        replaces its successor's (the announcement key's last writer wins), the
 *                        epoch is agreed on it, and its full list names a domain list no member
 *                        of the new one takes. Mended: such a list is failed and the next epoch
 *                        agreed (DomainLeader::round).
 *   NEWEST_ANNOUNCEMENT  the rule not built: an announcement of an older domain epoch does not
 *                        replace a newer one (a conditional write in the global agreement). With
 *                        the mend above, the searches below find no counterexample without it;
 *                        it would save the failed epoch.
 *   NO_TAKEOVER_FAIL     a new leader does not fail the first open global epoch (as built it
 *                        does: fail_open_epochs).
 *
 * Checked (check.sh): one fault (a crash or a pause), exhaustive; two faults (a crash, and a
 * pause that ends, in different domains), a bitstate search, which is partial (hash factor
 * about 3 at -w27: many states may be missed); and the two mends' mutations and
 * LEADER_NO_WAIT, each of which must give a counterexample.
 */

#ifndef D
#define D 2            /* domains */
#endif
#ifndef S
#define S 2            /* slots per domain */
#endif
#ifndef F
#define F 1            /* faults in a run (crash or pause), each in a different domain */
#endif
#define N (D * S)
#define EMAX 5         /* domain epochs 0..EMAX-1; asserted never exceeded */
#define GMAX 7         /* global epochs 0..GMAX-1; asserted never exceeded */
#define NONE 255
#define BIT(s) (1 << (s))

/* ---- domains ---- */
byte de[D];            /* domain d's current epoch */
byte dl[D * EMAX];     /* dl[d * EMAX + e]: the slots in domain d's list of epoch e (bitmask) */
byte darmed[D];        /* the global epoch the domain's leader agreed last (its watch's) */
byte dseen[D];         /* the global epoch whose failure the domain re-formed for (or posted) */

/* ---- slots ---- */
bool crashed[N];
bool paused[N];
bool out[N];           /* left out of its domain's current list */
byte nfaults;
byte faulted[D];       /* faults in domain d */
byte formed[N];        /* the global epoch a slot formed on last */
byte formed_e[N];      /* the domain epoch it formed in */

/* ---- the global store ---- */
bool gfail[GMAX];
byte ann[GMAX * D];    /* the domain epoch domain d announced in global epoch g (NONE) */
byte dec[GMAX];        /* the decider of g: a domain (NONE) */
bool gpub[GMAX];
byte lst[GMAX * D];    /* g's published list: each domain's domain epoch */

/* ---- the base of each list (the trainer's re-formation source, elastic::plan_reform) ---- */
byte ddone[D * EMAX];  /* the slots of domain d done in its epoch e (bitmask): mark_done */
bool gdone[GMAX * D];  /* global epoch g marked done for domain d by its leader */
byte gbase[GMAX];      /* the base epoch of g's list */
byte trained[GMAX];    /* the slots that took a step on g (bitmask, N <= 8) */
byte kept[N];          /* the base a slot kept from its last re-formation */

/* ---- the relay into each domain ---- */
#ifdef RELAY_ONE_KEY
byte relg[D];          /* <domain>/full: the latest full list relayed (its global epoch) */
byte rele[D];          /* <domain>/full_for: the domain epoch it was agreed for */
#define RELAYED(d, e) (rele[d] == (e) -> relg[d] : NONE)
#define RELAY(d, g, e) relg[d] = g; rele[d] = e
#else
byte relg[D * EMAX];   /* <domain>/full/<e>: the full list agreed for domain epoch e */
#define RELAYED(d, e) relg[(d) * EMAX + (e)]
#define RELAY(d, g, e) relg[(d) * EMAX + (e)] = g
#endif

#define ME (d * S + s)
#define LIST(d, e) dl[(d) * EMAX + (e)]

/* The lowest slot of domain d's list of epoch e: its leader. */
inline lowest(d, e, who) {
  who = 0;
  do
  :: who < S && (LIST(d, e) & BIT(who)) == 0 -> who++
  :: else -> break
  od
}

/* After each store operation: the domain re-formed since this slot read its epoch. */
#define CHECK if :: de[d] != e -> goto restart :: else -> skip fi

proctype slot(byte d; byte s) provided (!paused[d * S + s]) {
  byte e = 0;          /* the domain epoch this slot acts in */
  byte g, k, who, armed;
  byte entered = NONE; /* the global epoch this slot's round announced in (a dropped round's) */
  bool leader = 1;     /* it led its domain in its last round (slot 0 leads at the start) */
  bool was_pub;
  leader = (s == 0);
  {
    goto formed_wait;
restart:
    /* A round dropped by a re-formation: its global epoch is failed by the next round. */
    skip;
start:
    atomic {
      if
      :: out[ME] -> goto fenced   /* left out: its watch finds its silent record */
      :: else -> e = de[d]
      fi
    }
    lowest(d, e, who);
    if
    :: who == s -> goto lead
    :: else -> leader = 0; goto member
    fi;

lead:
    armed = darmed[d];
    atomic {  /* post_failure(armed); the relay of that failure into the domain is done */
      gfail[armed] = 1;
      if
      :: de[d] == e -> dseen[d] = armed  /* the watch's own state: a replaced leader's is not */
      :: else -> skip
      fi
    }
    CHECK;
    if
    :: entered != NONE && entered > armed -> gfail[entered] = 1; CHECK  /* fail_in_flight */
    :: else -> skip
    fi;
#ifndef NO_TAKEOVER_FAIL
    if
    :: !leader ->  /* a takeover: fail_open_epochs(armed) */
       k = armed + 1;
       do
       :: k < GMAX && gfail[k] -> k++
       :: k < GMAX && !gfail[k] ->
          atomic { was_pub = gpub[k]; gfail[k] = 1 };
          CHECK;
          if
          :: was_pub -> k++   /* a listed one on the way: failed too */
          :: else -> break    /* the open epoch: done */
          fi
       :: k >= GMAX -> assert(0)
       od
    :: else -> skip
    fi;
#endif
    leader = 1;
    g = armed + 1;
agree:
    do
    :: g < GMAX && gfail[g] -> g++
    :: g < GMAX && !gfail[g] -> break
    :: g >= GMAX -> assert(0)
    od;
    entered = g;
    atomic {  /* announce, and draw the ticket */
#ifdef NEWEST_ANNOUNCEMENT
      if  /* the newest domain epoch stands: a replaced leader's late write does not */
      :: ann[g * D + d] == NONE || ann[g * D + d] < e -> ann[g * D + d] = e
      :: else -> skip
      fi;
#else
      ann[g * D + d] = e;  /* as built: the announcement key's last writer */
#endif
      if
      :: dec[g] == NONE -> dec[g] = d
      :: else -> skip
      fi
    }
    CHECK;
    if
    :: dec[g] == d ->
       k = 0;
       do
       :: gfail[g] -> break
       :: k < D && ann[g * D + k] != NONE -> k++
       :: k == D -> break
       :: de[d] != e -> goto restart
       od;
       if
       :: gfail[g] -> g++; goto agree
       :: else ->
          atomic {
            k = 0;
            do
            :: k < D -> lst[g * D + k] = ann[g * D + k]; k++
            :: else -> break
            od;
            /* the base (decide): the decider's last list if every domain marked it done (its
             * complete()), else that list's base */
            was_pub = 1;
            k = 0;
            do
            :: k < D -> was_pub = was_pub && (armed == 0 || gdone[armed * D + k]); k++
            :: else -> break
            od;
            /* property 4: no update lost. A step on `armed` needs every slot of its list; if
             * every one took it, the epoch must be complete. */
            k = 0;
            do
            :: k < D -> if
                        :: (LIST(k, lst[armed * D + k]) << (k * S)) & ~trained[armed] -> break
                        :: else -> k++
                        fi
            :: else -> break
            od;
            assert(k < D || was_pub);
            gbase[g] = (was_pub -> armed : gbase[armed]);
            gpub[g] = 1
          }
          CHECK
       fi
    :: else ->
       if
       :: gpub[g] -> skip
       :: gfail[g] && !gpub[g] -> g++; goto agree
       :: de[d] != e -> goto restart
       fi
    fi;
#ifndef TAKE_ANY_LIST
    if  /* decider or not: a list agreed on a replaced leader's late announcement of this
         * domain's older list is not this domain's (DomainLeader::round) */
    :: lst[g * D + d] != e -> gfail[g] = 1; CHECK; g++; goto agree
    :: else -> skip
    fi;
#endif
    /* Agreed: the leader's global watch is armed on g from now on (a failure of an older
     * global epoch no longer re-forms the domain). Then the full list of g (composed by the
     * decider or read) is relayed for the domain epoch it was agreed for. */
    atomic {  /* the watch is this process's own: a leader already replaced arms nothing */
      if
      :: de[d] == e -> darmed[d] = g
      :: else -> goto restart
      fi
    }
    atomic { RELAY(d, g, lst[g * D + d]) };
    entered = NONE;
    CHECK;

member:
    do
    :: atomic {
         RELAYED(d, e) != NONE ->
         g = RELAYED(d, e);
         /* property 5 (plan_reform): a holder (a slot of the base's list) holds the base's
          * state, as the job it formed last or as the base it kept from it */
         k = gbase[g];
         assert((LIST(d, lst[k * D + d]) & BIT(s)) == 0 || k == formed[ME] || k == kept[ME]);
         kept[ME] = k;
         formed[ME] = g;
         formed_e[ME] = e;
         assert(gpub[formed[ME]] && lst[formed[ME] * D + d] == e)  /* property 1 */
       };
       break
    :: de[d] != e -> goto start
    od;
    atomic { ddone[d * EMAX + e] = ddone[d * EMAX + e] | BIT(s) };  /* mark_done */
    CHECK;
    if
    :: leader ->  /* HierarchyMember::mark_global_done: its whole domain done, then its mark */
#ifndef LEADER_NO_WAIT
       do
       :: (ddone[d * EMAX + e] & LIST(d, e)) == LIST(d, e) -> break
       :: de[d] != e -> goto start
       od;
#endif
       gdone[g * D + d] = 1;
       CHECK
    :: else -> skip
    fi;
    atomic { trained[g] = trained[g] | BIT(ME) };  /* its first step on g */

formed_wait:
end_formed:
    (de[d] != e) -> goto start;

fenced:
    skip
  } unless { crashed[ME] }
end_gone:
  skip
}

/* A slot of domain d's current list that crashed or is paused (S <= 3). */
#define GONE(d, s) ((LIST(d, de[d]) & BIT(s)) != 0 && (crashed[(d) * S + (s)] || paused[(d) * S + (s)]))
#define ANY_GONE(d) (GONE(d, 0) || GONE(d, 1) || (S > 2 && GONE(d, 2)))

/* The domain's re-formations: without a member that crashed or is paused (its progress still),
 * or with every member for a failure of the global epoch it is armed on. */
proctype domain(byte d) {
  byte s, e, keep;
end_watch:
  do
  :: atomic {
       ANY_GONE(d) ->
       e = de[d];
       keep = LIST(d, e);
       s = 0;
       do
       :: s < S ->
          if
          :: GONE(d, s) -> keep = keep & ~BIT(s); out[d * S + s] = 1
          :: else -> skip
          fi;
          s++
       :: else -> break
       od;
       assert(keep != 0 && e + 1 < EMAX);
       LIST(d, e + 1) = keep;
       de[d] = e + 1
     }
  :: atomic {
       gfail[darmed[d]] && dseen[d] != darmed[d] ->
       dseen[d] = darmed[d];
       e = de[d];
       assert(e + 1 < EMAX);
       LIST(d, e + 1) = LIST(d, e);
       de[d] = e + 1
     }
  od
}

/* F faults, each a crash or a pause of any slot, in different domains; a pause ends later. */
proctype fault() {
  byte v, p = NONE;
end_fault:
  do
  :: nfaults < F ->
     select(v : 0 .. N - 1);
     atomic {
       if
       :: faulted[v / S] == 0 && !crashed[v] && !out[v] ->
          faulted[v / S] = 1;
          nfaults++;
          if
          :: crashed[v] = 1
          :: p == NONE -> paused[v] = 1; p = v
          fi
       :: else -> skip
       fi
     }
  :: p != NONE -> paused[p] = 0; p = NONE   /* SIGCONT */
  od
}

/* At rest (no statement of anyone can run): property 2. */
active proctype monitor() {
  byte d, s, g = NONE;
end_rest:
  timeout ->
  atomic {
    d = 0;
    do
    :: d < D ->
       s = 0;
       do
       :: s < S ->
          if
          :: (LIST(d, de[d]) & BIT(s)) != 0 ->
             assert(formed_e[d * S + s] == de[d]);   /* it formed in its current epoch */
             if
             :: g == NONE -> g = formed[d * S + s]
             :: else -> assert(formed[d * S + s] == g)
             fi
          :: else -> skip
          fi;
          s++
       :: else -> break
       od;
       d++
    :: else -> break
    od;
    assert(g != NONE && gpub[g] && !gfail[g]);
    d = 0;
    do
    :: d < D -> assert(lst[g * D + d] == de[d]); d++
    :: else -> break
    od
  }
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < D ->
       LIST(i, 0) = (1 << S) - 1;
       lst[i] = 0;
       dseen[i] = NONE;
       RELAY(i, 0, 0);
       i++
    :: else -> break
    od;
    gpub[0] = 1;
    trained[0] = (1 << N) - 1;  /* epoch 0's job, built from drawn state: every slot in it */
    i = 0;
    do
    :: i < GMAX * D -> ann[i] = NONE; i++
    :: else -> break
    od;
    i = 1;
    do
    :: i < GMAX -> dec[i] = NONE; i++
    :: else -> break
    od;
#ifndef RELAY_ONE_KEY
    i = 0;
    do
    :: i < D * EMAX -> if :: i % EMAX != 0 -> relg[i] = NONE :: else -> skip fi; i++
    :: else -> break
    od;
#endif
    i = 0;
    do
    :: i < N -> run slot(i / S, i % S); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < D -> run domain(i); i++
    :: else -> break
    od;
    run fault()
  }
}
