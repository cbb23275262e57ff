/*
 * tokenbox on PostgreSQL: the locking that replaces SQLite's one write lock
 * (see docs/architecture.md, "PostgreSQL: locking without a file lock",
 * and docs/model.md, "PostgreSQL locking").
 *
 * Two workers W1, W2 of consumer group G1 each hold a copy of one message m
 * (an upstream re-send that landed in another partition, or a worker that
 * lost the group and still finishes its batch): W1 reads partition 0, W2
 * partition 1, each holding one record of m.  m has one G1 token in T.
 * Its handler queues one outgoing message, read by two downstream groups.
 * A sweeper (register-cleanup) runs alongside.
 *
 * Unlike tokenbox.pml, A is not one atomic step under a file lock: its
 * statements are separate steps, between which the other worker's
 * statements run, as READ COMMITTED transactions interleave on a server:
 *   lock      pg_advisory_xact_lock on (group, message id), in S, before
 *             any savepoint; released only when A's transaction ends
 *   row       SELECT of the outbox row: a new statement, so a new snapshot
 *             taken after the lock was granted
 *   token     SELECT of the token row: in T (its own session, autocommit)
 *             or, JOINED, in A's own transaction
 *   insert    the handler's effects, then INSERT of the outbox row ... ON
 *             CONFLICT (grp, msg_id) DO NOTHING, sent with A's next
 *             statement or its COMMIT: an insert of a key that an open
 *             transaction inserted waits for it; a key that exists
 *             committed inserts nothing, which fails A whole (rolled back;
 *             its redelivery finds the row and resumes it)
 *   commit    the effects, the row (JOINED: its attempt and the downstream
 *             tokens) become visible at once; the locks go
 * Every other transaction (B's mint and record, confirm, D, E, D+E, the
 * sweeper's) is one step: its statements take row locks that serialise it
 * against the others on the same rows, and READ COMMITTED re-reads a row
 * that a concurrent transaction changed (UPDATE ... WHERE attempt IS NULL
 * then matches nothing), so each behaves as if it ran alone at its commit.
 *
 * A crash (a killed process, a lost connection, pg_terminate_backend)
 * rolls back every open transaction of the worker and releases its locks;
 * the worker restarts at its partition's committed offset.
 *
 * Switches (compile with -D...):
 *   JOINED                 S and T in one database: A mints (attempt and
 *                          downstream tokens, no registration) in its own
 *                          transaction; D and E are one transaction
 *   TOKEN_LOCK             JOINED only: no advisory lock; instead the token
 *                          row is read with SELECT ... FOR SHARE after the
 *                          row check (D+E's DELETE of it waits), and
 *                          concurrent As are serialised by the unique key
 *   RECOVERY               a recovery pass resumes the row once, at any
 *                          time, and may die after any of its steps
 *   NOCRASH / MAXCRASH=n   crash budget (default 2)
 * Broken variants:
 *   BUG_NO_LOCK            no advisory lock: the row and token are read
 *                          with plain SELECTs, the unique key is kept
 *   BUG_SNAPSHOT_BEFORE_LOCK  the row (JOINED: and the token) are read in a
 *                          snapshot taken before the lock was granted
 *                          (REPEATABLE READ, or the lock and the check in
 *                          one statement)
 *   BUG_TOKEN_BEFORE_ROW   the token is checked before the row
 *   BUG_LOCK_IN_T          separate stores; the lock is SELECT ... FOR
 *                          UPDATE on the token row in T's transaction,
 *                          held across A; T's session can be terminated
 *                          while S's transaction goes on
 *   BUG_NO_UNIQUE          the outbox insert has no unique key to conflict
 *                          on (fails with TOKEN_LOCK)
 *   BUG_CONFLICT_IGNORED   an insert that inserted nothing does not fail A:
 *                          A commits the handler's effects without its row
 *                          (fails with TOKEN_LOCK, where the unique key is
 *                          what serialises two As)
 *   WFAIL                  the handler's write, deferred like the row's
 *                          insert, fails once (found by a later statement
 *                          or the commit): A rolls back whole and is done
 *                          again at once, its statements not deferred
 *   BUG_WRITE_FAILURE_IGNORED  (with WFAIL) A commits the row although the
 *                          handler's write failed: m is marked handled
 *                          without its effect
 */

#if defined(TOKEN_LOCK) && !defined(JOINED)
#error "TOKEN_LOCK needs JOINED: a row lock in T cannot guard S's commit"
#endif
#if defined(BUG_LOCK_IN_T) && defined(JOINED)
#error "BUG_LOCK_IN_T is the separate layout"
#endif
#if defined(RECOVERY) && defined(JOINED)
#error "RECOVERY models the general path only"
#endif
#if defined(BUG_NO_LOCK) || defined(TOKEN_LOCK) || defined(BUG_LOCK_IN_T)
#define NOADV
#endif

#ifndef MAXCRASH
#ifdef NOCRASH
#define MAXCRASH 0
#else
#define MAXCRASH 2
#endif
#endif

#define NGRP   2           /* downstream groups */
#ifndef MAXATT
#define MAXATT 6           /* attempt ids 1..MAXATT; 0 = none */
#endif

/* ---- Kafka: two partitions, one copy of m each ---- */
bit  in_commit[2];         /* partition p's record committed (F) */

/* ---- T ---- */
bit  tok_in;               /* G1's token row for m */
bit  reg[MAXATT + 1];      /* registration of attempt a */
bit  tok_out[(MAXATT + 1) * NGRP];
byte natt;
#define TOK(a, g) tok_out[(a) * NGRP + (g)]
byte tlock;                /* BUG_LOCK_IN_T: FOR UPDATE on the token row */
byte tshare;               /* TOKEN_LOCK: FOR SHARE holders, bit per worker */

/* ---- S ---- */
byte alock;                /* advisory lock on (G1, m): owner, 0 free */
byte ins;                  /* an open transaction's insert of (G1, m) */
bit  row;                  /* committed outbox row (G1, m) */
byte row_att;              /* its attempt, 0 = none */
byte effect;               /* committed handler effects */

/* ---- output topic, downstream ---- */
bit  produced[MAXATT + 1];
byte dproc[NGRP];

byte crashes;
byte wdone;
#ifdef WFAIL
bit  wfailed;              /* the one failure of a deferred write is spent */
#endif
#ifdef RECOVERY
bit  rdone;
#define ALLDONE (wdone == 2 && rdone)
#else
#define ALLDONE (wdone == 2)
#endif

/* a connection's end rolls back its transactions and frees their locks */
#define RELEASE(w) \
	alock = (alock == (w) -> 0 : alock); \
	ins = (ins == (w) -> 0 : ins); \
	tlock = (tlock == (w) -> 0 : tlock); \
	tshare = tshare & (3 - (w))

#define CRASH \
	if \
	:: crashes < MAXCRASH -> crashes++; goto restart \
	:: true -> skip /* not "else": that would force the crash */ \
	fi

/* a DELETE of the token row waits for another session's row lock on it */
#define TOKFREE(w) ((tlock == 0 || tlock == (w)) && (tshare & (3 - (w))) == 0)

#if MAXATT == 6
#define ANYREG (reg[1] || reg[2] || reg[3] || reg[4] || reg[5] || reg[6])
#elif MAXATT == 8
#define ANYREG (reg[1] || reg[2] || reg[3] || reg[4] || reg[5] || reg[6] || \
		reg[7] || reg[8])
#else
#error "MAXATT is 6 or 8"
#endif

#define CONSUME(a, g) \
	if \
	:: TOK(a, g) -> TOK(a, g) = 0; dproc[g]++; assert(dproc[g] <= 1) \
	:: else -> skip \
	fi

#define DROP     0
#define HANDLE   1
#define RESUME   2
#define CONFLICT 3

proctype Worker(byte me)
{
	byte a, act;
	bit r, t, won, lost;
#ifdef JOINED
	bit ja;
#endif

restart:
	atomic { RELEASE(me) };
	a = 0; act = 0; r = 0; t = 0; won = 0; lost = 0;
#ifdef JOINED
	ja = 0;
#endif
	if
	:: in_commit[me - 1] -> goto done
	:: else -> skip
	fi;

	/* ---- A: BEGIN (READ COMMITTED) */
#ifdef BUG_SNAPSHOT_BEFORE_LOCK
	/* REPEATABLE READ: the transaction's snapshot is taken by its first
	 * statement, the one that then waits for the lock */
	atomic {
		r = row;
#ifdef JOINED
		t = tok_in;
#endif
		skip
	}
#endif
#ifndef NOADV
	atomic { alock == 0 -> alock = me } /* pg_advisory_xact_lock */
#endif
#ifdef BUG_LOCK_IN_T
	/* SELECT ... FOR UPDATE on the token row, in T's open transaction */
	atomic { tlock == 0 -> tlock = me }
#endif
#ifdef BUG_TOKEN_BEFORE_ROW
	t = tok_in;
#endif
#ifndef BUG_SNAPSHOT_BEFORE_LOCK
	r = row;                            /* a new statement: a new snapshot */
#endif
	if
	:: r ->
		/* row found: resume (a new statement reads its attempt) */
		atomic {
			if
			:: row -> a = row_att; act = RESUME
			:: else -> act = DROP
			fi
		}
		goto commit_a
	:: else -> skip
	fi;
#ifdef TOKEN_LOCK
	/* SELECT ... FOR SHARE on the token row (same database, same
	 * transaction): a D+E that deletes it waits for A to end */
	atomic {
		t = tok_in;
		if
		:: t -> tshare = tshare | me
		:: else -> skip
		fi
	}
#elif !defined(BUG_TOKEN_BEFORE_ROW) && \
	!(defined(BUG_SNAPSHOT_BEFORE_LOCK) && defined(JOINED))
	t = tok_in;
#endif
#ifdef BUG_LOCK_IN_T
	/* T's session is terminated (pg_terminate_backend, a network cut):
	 * the row lock goes, S's transaction goes on unaware */
	if
	:: crashes < MAXCRASH -> crashes++; tlock = 0
	:: true -> skip
	fi;
#endif
	if
	:: !t -> act = DROP; goto commit_a /* finished: a duplicate */
	:: else -> skip
	fi;
	/* SAVEPOINT; the handler runs, its effects A's own until the commit;
	 * then INSERT ... ON CONFLICT DO NOTHING of the row, sent with A's
	 * next statement or its COMMIT (store/pg.h, tbx__pg_defer()) */
	atomic {
#ifdef BUG_NO_UNIQUE
		act = HANDLE
#else
		(ins == 0) ->                   /* waits for an open insert */
		if
		:: row ->
			/* 0 rows inserted: the statement fails, and with it
			 * the whole A */
			act = CONFLICT
		:: else -> ins = me; act = HANDLE
		fi
#endif
	}
	if
	:: act == CONFLICT ->
#ifdef BUG_CONFLICT_IGNORED
		/* the count of rows inserted is not checked: A commits the
		 * handler's effects without a row of its own */
		act = HANDLE
#else
		/* A rolls back, its locks go; the redelivery starts A again
		 * and finds the committed row */
		goto restart
#endif
	:: else -> skip
	fi;
#ifdef WFAIL
	/* The handler's write was deferred (tbx_ctx_exec() with no count
	 * asked for) and fails where it is sent: A's transaction is aborted */
	if
	:: act == HANDLE && !wfailed ->
		wfailed = 1;
#ifdef BUG_WRITE_FAILURE_IGNORED
		lost = 1 /* committed anyway: the row without the effect */
#else
		/* rolled back whole, its locks gone; done again at once, the
		 * write now failing or succeeding where it is made */
		goto restart
#endif
	:: true -> skip
	fi;
#endif
	CRASH; /* A.handled, A.before_commit: nothing of A persists */
commit_a:
	atomic {
		if
		:: act == HANDLE ->
			effect = effect + (1 - lost);
			assert(effect <= 1);    /* the handler took effect once */
			row = 1;
#ifdef JOINED
			assert(natt < MAXATT);  /* model bound */
			natt++;
			a = natt;
			TOK(a, 0) = 1;
			TOK(a, 1) = 1;
			ja = 1;
			row_att = a
#else
			row_att = 0
#endif
		:: else -> skip
		fi;
		ins = (ins == me -> 0 : ins);
		alock = (alock == me -> 0 : alock);
		tshare = tshare & (3 - me)
	}
#ifdef BUG_LOCK_IN_T
	atomic { tlock = (tlock == me -> 0 : tlock) } /* T's COMMIT */
#endif
	if
	:: act == DROP -> goto commit
	:: else -> skip
	fi;
	CRASH; /* A.committed */

	/* ---- B, for a row without attempt */
	if
	:: a == 0 ->
		atomic { /* T: mint, register */
			assert(natt < MAXATT); /* model bound */
			natt++;
			a = natt;
			reg[a] = 1;
			TOK(a, 0) = 1;
			TOK(a, 1) = 1
		}
		CRASH; /* B.minted */
		atomic { /* S: UPDATE ... WHERE attempt IS NULL */
			if
			:: row && row_att == 0 -> row_att = a; won = 1
			:: else -> won = 0
			fi
		}
		CRASH; /* B.recorded */
		if
		:: won -> won = 0
		:: else ->
			atomic { /* T: DELETE registrations RETURNING, then tokens */
				if
				:: reg[a] -> reg[a] = 0; TOK(a, 0) = 0; TOK(a, 1) = 0
				:: else -> skip
				fi
			}
			CRASH;
			atomic { /* S: the row again */
				if
				:: row -> a = row_att
				:: else -> a = 0
				fi
			}
			if
			:: a == 0 -> goto commit
			:: else -> skip
			fi
		fi
	:: else -> skip
	fi;

	/* ---- C: confirm, produce */
#ifdef JOINED
	atomic {
		if
		:: ja -> ja = 0
		:: else -> reg[a] = 0
		fi
	}
#else
	reg[a] = 0;
#endif
	CRASH; /* C.confirmed */
	atomic { produced[a] = 1; CONSUME(a, 0); CONSUME(a, 1) }
	CRASH; /* C.produced / C.delivered */

#ifdef JOINED
	/* ---- D+E: one transaction: DELETE the token, DELETE the row */
	atomic { TOKFREE(me) -> tok_in = 0; row = 0; row_att = 0 }
	CRASH; /* E.deleted */
#else
	atomic { TOKFREE(me) -> tok_in = 0 } /* D */
	CRASH; /* D.consumed */
	atomic { row = 0; row_att = 0 }      /* E */
	CRASH; /* E.deleted */
#endif

commit:
	/* ---- F */
	in_commit[me - 1] = 1;
	a = 0; act = 0; r = 0; t = 0;
	CRASH; /* F.committed */
done:
	wdone++
}

#define SAME   0
#define ORPHAN 1
#define LEAVE  2

proctype Sweeper()
{
	byte a, verdict;

	do
	:: ANYREG ->
		atomic { /* the oldest registration, classified against S */
			a = 1;
			do
			:: a > MAXATT -> a = 0; break
			:: a <= MAXATT && reg[a] -> break
			:: a <= MAXATT && !reg[a] -> a++
			od;
			if
			:: a == 0 -> verdict = LEAVE
			:: row && row_att == a -> verdict = SAME
			:: row && row_att == 0 -> verdict = LEAVE
			:: else -> verdict = ORPHAN
			fi
		}
		if /* then T, in a transaction of its own */
		:: verdict == SAME -> reg[a] = 0
		:: verdict == ORPHAN ->
			atomic {
				if
				:: reg[a] -> reg[a] = 0; TOK(a, 0) = 0; TOK(a, 1) = 0
				:: else -> skip
				fi
			}
		:: else -> skip
		fi;
		a = 0; verdict = 0
	:: ALLDONE && !ANYREG -> break
	od
}

#ifdef RECOVERY
/* The recovery pass: resumes the row once, at any time, through B-E; no
 * handler, no lock.  It may die after any step (STOP) and is not started
 * again: the workers finish what it leaves. */
#define STOP \
	if \
	:: true -> goto next \
	:: true -> skip \
	fi

proctype Recovery()
{
	byte a;
	bit won;

	if
	:: atomic { row -> a = row_att }
	:: wdone == 2 -> goto next
	fi;
	if
	:: a == 0 ->
		atomic {
			assert(natt < MAXATT);
			natt++;
			a = natt;
			reg[a] = 1;
			TOK(a, 0) = 1;
			TOK(a, 1) = 1
		}
		STOP;
		atomic {
			if
			:: row && row_att == 0 -> row_att = a; won = 1
			:: else -> won = 0
			fi
		}
		STOP;
		if
		:: won -> won = 0
		:: else ->
			atomic {
				if
				:: reg[a] -> reg[a] = 0; TOK(a, 0) = 0; TOK(a, 1) = 0
				:: else -> skip
				fi
			}
			STOP;
			atomic {
				if
				:: row -> a = row_att
				:: else -> a = 0
				fi
			}
			if
			:: a == 0 -> goto next
			:: else -> skip
			fi
		fi
	:: else -> skip
	fi;
	reg[a] = 0;
	STOP;
	atomic { produced[a] = 1; CONSUME(a, 0); CONSUME(a, 1) }
	STOP;
	atomic { TOKFREE(3) -> tok_in = 0 }
	STOP;
	atomic { row = 0; row_att = 0 }
next:
	a = 0;
	rdone = 1
}
#endif

init
{
	byte i;

	atomic {
		tok_in = 1;
		run Worker(1);
		run Worker(2);
		run Sweeper();
#ifdef RECOVERY
		run Recovery();
#endif
		skip
	}
	(_nr_pr == 1);
	/* m took effect once, in G1 and in each downstream group; nothing of
	 * it is left in S or T */
	atomic {
		assert(in_commit[0] && in_commit[1]);
		assert(effect == 1);
		assert(dproc[0] == 1 && dproc[1] == 1);
		assert(!row && !tok_in);
		assert(alock == 0 && ins == 0 && tlock == 0 && tshare == 0);
		i = 1;
		do
		:: i <= MAXATT ->
			assert(!reg[i] && !TOK(i, 0) && !TOK(i, 1));
			i++
		:: else -> break
		od
	}
}
