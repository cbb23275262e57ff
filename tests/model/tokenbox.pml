/*
 * tokenbox exactly-once protocol: a Promela model (see docs/model.md).
 *
 * One sending service (consumer group G1, two workers W1, W2) reads one
 * partition of the incoming topic holding three records: message 0,
 * message 1, and a re-sent copy of message 0 (same id, same token).
 * Each handled message queues one outgoing message (outgoing message m
 * belongs to incoming message m) to an output topic read by two
 * downstream groups D1, D2.  A sweeper (register-cleanup) runs alongside.
 *
 * Per record, a worker runs A (process), B (tokens), C (dispatch),
 * D (consume incoming token), E (finish: delete row), F (commit offset),
 * and may crash between any two persistent steps (bounded by MAXCRASH).
 *
 * JOINED models single-file mode (S and T one file): B happens inside A
 * (the handled row gets its attempt and the downstream tokens in A's
 * transaction, with no registration), C has nothing to confirm for such
 * an attempt, and D and E are one transaction.
 *
 * Broken variants (compile with -D...):
 *   BUG_CHECK_BEFORE_LOCK        A reads row/token before S's write lock
 *   BUG_CONSUME_BEFORE_DISPATCH  D before C (a legal reordering, see docs)
 *   BUG_CONSUME_BEFORE_COMMIT    D before A's commit (token gone, no row)
 *   BUG_DELETE_ROW_BEFORE_TOKEN  E before D
 *   BUG_UNCONDITIONAL_RECORD     B's record overwrites an existing attempt
 *   BUG_JOINED_TOKENS_APART      JOINED, but the tokens (still without
 *                                registration) commit in a transaction of
 *                                their own before A's
 *   BUG_JOINED_REGISTERED        JOINED, but A's mint also registers the
 *                                attempt while C still skips confirm for it
 *                                (fails with ASYNC_DOWNSTREAM)
 *   BUG_RECOVERY_REMINT          RECOVERY, but the pass mints an attempt of
 *                                its own for every row it resumes and
 *                                records it over the one recorded
 *   BUG_GIVEUP_LOSES             GIVEUP, but a message given up is dropped
 *                                instead of kept for a re-send
 *   BUG_DEFER_COMMITS_EARLY      DEFER_FINISH, but a record whose D+E waits
 *                                for the next A has its offset committed at
 *                                once
 * Other switches:
 *   RECOVERY                     a recovery pass runs alongside: it resumes
 *                                any outbox row at any time through B-E, as
 *                                the pass for rows below the committed
 *                                offset does, without a handler (general
 *                                path only)
 *   GIVEUP                       C may find an outgoing message refused for
 *                                good: after its retries it is given up —
 *                                kept in S (tbx_undelivered) with its attempt
 *                                and token, not produced — and the row
 *                                finishes; an operator re-sends it once the
 *                                workers are done (inspect undelivered
 *                                resend)
 *   DEFER_FINISH                 JOINED, with the D+E of a record done in
 *                                the next record's A transaction (before its
 *                                check) instead of one of its own, and the
 *                                record's offset committed after that A; a
 *                                worker with nothing left to process commits
 *                                the D+E on its own (finish.defer)
 *   JOINED_MIXED                 JOINED for W1 only; W2 is an older process
 *                                on the same file (general path: rows
 *                                without attempt, B, separate D and E)
 *   NOCRASH / MAXCRASH=n         crash budget (default 2)
 *   ASYNC_DOWNSTREAM             D1, D2 as processes of their own instead of
 *                                consuming at produce time (much larger)
 */

#ifdef BUG_DEFER_COMMITS_EARLY
#ifndef DEFER_FINISH
#define DEFER_FINISH
#endif
#endif
#if defined(BUG_JOINED_TOKENS_APART) || defined(BUG_JOINED_REGISTERED) || \
	defined(JOINED_MIXED) || defined(DEFER_FINISH)
#ifndef JOINED
#define JOINED
#endif
#endif
#ifdef BUG_RECOVERY_REMINT
#ifndef RECOVERY
#define RECOVERY
#endif
#endif
#if defined(RECOVERY) && defined(JOINED)
#error "RECOVERY models the general path only"
#endif
#ifdef JOINED_MIXED
#define JW (me == 1)       /* this worker runs the joined path */
#else
#define JW 1
#endif

#ifndef MAXCRASH
#ifdef NOCRASH
#define MAXCRASH 0
#else
#define MAXCRASH 2
#endif
#endif

#define NIN     3          /* records in the incoming partition */
#define NMSG    2          /* logical incoming (= outgoing) messages */
#define NGRP    2          /* downstream groups D1, D2 */
#define MAXATT  8          /* attempt ids 1..MAXATT; 0 = none */

/* ---- incoming topic (one partition) ---- */
byte inq[NIN];             /* record offset -> message id */
byte in_commit;            /* G1's committed offset */

/* ---- token store T ---- */
bit  tok_in[NMSG];                 /* G1's token row for incoming msg m */
byte att_msg[MAXATT + 1];          /* attempt -> outgoing message (= row id) */
bit  reg[MAXATT + 1];              /* registration of an attempt (G1's) */
bit  tok_out[(MAXATT + 1) * NGRP]; /* token row (attempt's token, group) */
byte natt;                         /* attempt id counter */
#define TOK(a, g) tok_out[(a) * NGRP + (g)]

/* ---- service store S (G1's) ---- */
byte slock;                /* S write lock owner: 0 free, else worker id */
bit  row[NMSG];            /* outbox row (G1, message m) exists */
byte row_att[NMSG];        /* its attempt, 0 = none (PROCESSED) */
byte effect[NMSG];         /* committed handler effects of message m */

/* ---- output topic and downstream ---- */
bit  produced[MAXATT + 1]; /* a record with this attempt's token is in Kafka */
byte kept[NMSG];           /* GIVEUP: attempt of outgoing msg m kept in S's
			      tbx_undelivered, 0 = none */
byte dproc[NMSG * NGRP];   /* downstream effects per (outgoing msg, group) */
#define DPROC(m, g) dproc[(m) * NGRP + (g)]

/* ---- bookkeeping ---- */
byte crashes;
byte wdone;
#ifdef RECOVERY
/* One worker: the pass is the second party on the rows (a second worker
 * as well makes the search too large for the suite). */
#define NWORK 1
bit  rdone;                /* the recovery pass has stopped */
#define ALLDONE (wdone == NWORK && rdone)
#else
#define NWORK 2
#define ALLDONE (wdone == NWORK)
#endif

#define CRASH \
	if \
	:: crashes < MAXCRASH -> crashes++; goto restart \
	:: true -> skip /* not "else": that would force the crash */ \
	fi

#define ANYREG (reg[1] || reg[2] || reg[3] || reg[4] || reg[5] || reg[6] || \
		reg[7] || reg[8])
#define CONS1(a, g) (produced[a] && TOK(a, g))
#define CONS(g) (CONS1(1, g) || CONS1(2, g) || CONS1(3, g) || \
		 CONS1(4, g) || CONS1(5, g) || CONS1(6, g) || \
		 CONS1(7, g) || CONS1(8, g))

/* a downstream group's whole exactly-once step: check + effect + delete
 * its own token row, atomically; a copy whose token is gone is dropped */
#define CONSUME(a, g) \
	if \
	:: TOK(a, g) -> \
		TOK(a, g) = 0; \
		DPROC(att_msg[a], g)++; \
		assert(DPROC(att_msg[a], g) <= 1) \
	:: else -> skip \
	fi

/* actions decided by A */
#define DROP   0
#define HANDLE 1
#define RESUME 2

/* ------------------------------------------------------------------ */
/* A sending worker of G1.                                             */
/* ------------------------------------------------------------------ */
proctype Worker(byte me)
{
	byte pos, m, a, act;
	bit won;
#ifdef JOINED
	bit ja;                             /* attempt made in this A */
#endif
#ifdef DEFER_FINISH
	byte pm;                            /* message whose D+E waits, + 1 */
	byte pp;                            /* the offset to commit after it */
	bit deferred;                       /* this record's D+E waits */
#endif

restart:
	slock = (slock == me -> 0 : slock); /* a dead process holds no lock */
	m = 0; a = 0; act = 0; won = 0;     /* volatile state is lost */
#ifdef JOINED
	ja = 0;
#endif
#ifdef DEFER_FINISH
	pm = 0; pp = 0; deferred = 0;
#endif
	pos = in_commit;                    /* resume at the committed offset */
	do
	:: pos >= NIN -> break
	:: else ->
		m = inq[pos];
		a = 0;

		/* ---- A: process (phase_process / process_one / run_handler) */
#ifdef BUG_CHECK_BEFORE_LOCK
		/* the row/token check runs before S's write lock is held */
		atomic {
			if
			:: row[m] -> act = RESUME
			:: else -> act = (tok_in[m] -> HANDLE : DROP)
			fi
		}
		atomic { slock == 0 -> slock = me }
#else
		/* BEGIN IMMEDIATE; the check runs under S's write lock.  Taking
		 * the lock and checking are one step: while the lock is held no
		 * row can change, and the token can only disappear through a D
		 * that follows some A's commit, i.e. only when a row exists. */
		atomic {
			slock == 0 -> slock = me;
			if
#ifdef DEFER_FINISH
			/* the waiting D+E are this transaction's first
			 * statements: the check sees their row and token gone */
			:: pm != 0 && m == pm - 1 -> act = DROP
#endif
			:: row[m] -> act = RESUME
			:: else -> act = (tok_in[m] -> HANDLE : DROP)
			fi
		}
#endif
#ifdef BUG_CONSUME_BEFORE_COMMIT
		/* D before A's commit: the incoming token goes first */
		if
		:: act == HANDLE -> tok_in[m] = 0;
			if
			:: crashes < MAXCRASH -> crashes++; slock = 0; goto restart
			:: true -> skip
			fi
		:: else -> skip
		fi
#endif
#ifdef BUG_JOINED_TOKENS_APART
		/* the joined mint (no registration) in a T transaction of its
		 * own, committed before A's: a crash in between leaves tokens
		 * that no row names and no registration lists */
		if
		:: act == HANDLE ->
			atomic {
				assert(natt < MAXATT); /* model bound */
				natt++;
				a = natt;
				att_msg[a] = m;
				TOK(a, 0) = 1;
				TOK(a, 1) = 1
			}
			CRASH
		:: else -> skip
		fi;
#endif
		atomic {
			if
			:: act == HANDLE ->
				/* handler effects and the row: one S transaction */
				effect[m]++;
				assert(effect[m] <= 1); /* handler commits at most once */
				row[m] = 1;
#ifdef JOINED
				if
				:: JW ->
#ifndef BUG_JOINED_TOKENS_APART
					/* joined (mint_in_A): in the same
					 * transaction, a new attempt and a token
					 * row per subscribed group (D1, D2), and
					 * no registration: the attempt cannot be
					 * persisted without the row naming it */
					assert(natt < MAXATT); /* model bound */
					natt++;
					a = natt;
					att_msg[a] = m;
					TOK(a, 0) = 1;
					TOK(a, 1) = 1;
#ifdef BUG_JOINED_REGISTERED
					reg[a] = 1;
#endif
#endif
					ja = 1;
					row_att[m] = a /* the row carries it */
				:: else -> row_att[m] = 0
				fi
#else
				row_att[m] = 0
#endif
			:: act == RESUME -> a = row_att[m]
			:: else -> skip
			fi;
#ifdef DEFER_FINISH
			/* the waiting D+E commit with this A, whatever it did */
			if
			:: pm != 0 ->
				tok_in[pm - 1] = 0; row[pm - 1] = 0;
				row_att[pm - 1] = 0; pm = 0
			:: else -> skip
			fi;
#endif
			slock = 0 /* COMMIT */
		}
		if
		:: act == DROP -> goto commit
		:: else -> skip
		fi;
		CRASH; /* A.committed */

		/* ---- B: tokens (phase_tokens), for a row without attempt; joined,
		 * A gave every row it made one, so B is skipped */
		if
		:: a == 0 ->
			/* one T transaction: new attempt, registration, a token
			 * row per subscribed group (D1, D2) */
			atomic {
				assert(natt < MAXATT); /* model bound, not a property */
				natt++;
				a = natt;
				att_msg[a] = m;
				reg[a] = 1;
				TOK(a, 0) = 1;
				TOK(a, 1) = 1
			}
			CRASH; /* B.minted */
			/* one S transaction: record the attempt */
			atomic {
				slock == 0 ->
#ifdef BUG_UNCONDITIONAL_RECORD
				if
				:: row[m] -> row_att[m] = a; won = 1
				:: else -> won = 0
				fi
#else
				if
				:: row[m] && row_att[m] == 0 -> row_att[m] = a; won = 1
				:: else -> won = 0
				fi
#endif
			}
			CRASH; /* B.recorded */
			if
			:: won -> won = 0
			:: else ->
				/* loser: drop own tokens (only if registered) */
				atomic {
					if
					:: reg[a] -> reg[a] = 0; TOK(a, 0) = 0; TOK(a, 1) = 0
					:: else -> skip
					fi
				}
				CRASH;
				/* reload the row: the winner's attempt, or gone */
				atomic {
					slock == 0 ->
					if
					:: row[m] -> a = row_att[m]
					:: else -> a = 0
					fi
				}
				if
				:: a == 0 -> goto commit /* another worker finished it */
				:: else -> skip
				fi
			fi
		:: else -> skip
		fi;

#ifdef BUG_CONSUME_BEFORE_DISPATCH
		tok_in[m] = 0; /* D */
		CRASH;         /* D.consumed */
#endif
		/* ---- C: dispatch (phase_dispatch) */
#ifdef JOINED
		/* confirm, except for an attempt made in this A (never
		 * registered); a resumed row is confirmed (finds nothing) */
		atomic {
			if
			:: ja -> ja = 0
			:: else -> reg[a] = 0
			fi
		}
#else
		reg[a] = 0;    /* confirm: delete the attempt's registration */
#endif
		CRASH;         /* C.confirmed */
		atomic {       /* produce (a copy if produced before) */
#ifdef GIVEUP
			if
			:: kept[m] == 0 && !produced[a] ->
				/* refused for good, retries used up: given up
				 * (one S transaction, before D and E) */
#ifndef BUG_GIVEUP_LOSES
				kept[m] = a
#else
				skip
#endif
			:: kept[m] != 0 -> skip /* given up before a crash */
			:: kept[m] == 0 ->
#endif
			produced[a] = 1;
#ifndef ASYNC_DOWNSTREAM
			/* downstream D1, D2 consume the record at once */
			CONSUME(a, 0);
			CONSUME(a, 1)
#endif
#ifdef GIVEUP
			fi
#endif
		}
		CRASH;         /* C.produced / C.delivered */

#ifdef BUG_DELETE_ROW_BEFORE_TOKEN
		/* ---- E before D */
		atomic { slock == 0 -> row[m] = 0; row_att[m] = 0 }
		CRASH;
		tok_in[m] = 0;
		CRASH;
#elif defined(JOINED)
#ifdef JOINED_MIXED
		if
		:: !JW ->      /* the older process: D, then E */
			tok_in[m] = 0;
			CRASH; /* D.consumed */
			atomic { slock == 0 -> row[m] = 0; row_att[m] = 0 }
			CRASH  /* E.deleted */
		:: else ->
#endif
#ifdef DEFER_FINISH
		/* ---- D+E wait for the next A (or the end of the work) */
		pm = m + 1;
		deferred = 1;
		goto commit
#else
		/* ---- D+E: one S transaction (phase_finish, joined): D's delete
		 * of the incoming token, then the row */
		atomic { slock == 0 -> tok_in[m] = 0; row[m] = 0; row_att[m] = 0 }
		CRASH          /* E.deleted */
#endif
#ifdef JOINED_MIXED
		fi
#endif
		;
#else
#ifndef BUG_CONSUME_BEFORE_DISPATCH
		/* ---- D: consume the incoming token (phase_consume) */
		tok_in[m] = 0;
		CRASH;         /* D.consumed */
#endif
		/* ---- E: finish (phase_finish) */
		atomic { slock == 0 -> row[m] = 0; row_att[m] = 0 }
		CRASH;         /* E.deleted */
#endif

commit:
		/* ---- F: commit the offset (phase_commit) */
		atomic {
#ifdef DEFER_FINISH
			if
			:: deferred ->
				/* this record's D+E wait: commit only as far as
				 * the record before, whose D+E committed with this
				 * record's A */
#ifdef BUG_DEFER_COMMITS_EARLY
				pp = pos + 1;
#endif
				if
				:: in_commit < pp -> in_commit = pp
				:: else -> skip
				fi;
				pp = pos + 1;
				deferred = 0
			:: else ->
				pp = 0;
#endif
			if
			:: in_commit < pos + 1 -> in_commit = pos + 1
			:: else -> skip
			fi;
#ifdef DEFER_FINISH
			fi;
#endif
			pos++;
			m = 0; a = 0; act = 0
		}
		CRASH          /* F.committed */
	od;
#ifdef DEFER_FINISH
	/* nothing left to process: the waiting D+E in a transaction of their
	 * own (E.deleted), then their offset */
	if
	:: pm != 0 ->
		atomic {
			slock == 0 ->
			tok_in[pm - 1] = 0; row[pm - 1] = 0; row_att[pm - 1] = 0;
			pm = 0
		}
		CRASH;
		atomic {
			if
			:: in_commit < pp -> in_commit = pp
			:: else -> skip
			fi;
			pp = 0
		}
	:: else -> skip
	fi;
#endif
	wdone++
}

/* ------------------------------------------------------------------ */
/* Register-cleanup (tokens/sweep.c) for G1's registrations.           */
/* ------------------------------------------------------------------ */
#define SAME   0
#define ORPHAN 1
#define LEAVE  2

proctype Sweeper()
{
	byte a, m, verdict;

	do
	:: ANYREG ->
		/* pick a registration and classify it against S */
		atomic {
			/* the oldest registration first */
			a = 1;
			do
			:: a > MAXATT -> a = 0; break
			:: a <= MAXATT && reg[a] -> break
			:: a <= MAXATT && !reg[a] -> a++
			od;
			if
			:: a == 0 -> verdict = LEAVE
			:: else ->
				m = att_msg[a];
				if
				:: row[m] && row_att[m] == a -> verdict = SAME
				:: row[m] && row_att[m] == 0 -> verdict = LEAVE
				:: else -> verdict = ORPHAN
				fi
			fi
		}
		/* ... then act on T in a separate transaction */
		if
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
		a = 0; m = 0; verdict = 0
	:: ALLDONE && !ANYREG -> break
	od
}

#ifdef GIVEUP
/* The operator, once the workers are done: `inspect undelivered resend`
 * produces each kept message with its own attempt's token. */
proctype Operator()
{
	byte m, a;

	wdone == NWORK;
	m = 0;
	do
	:: m < NMSG ->
		atomic {
			a = kept[m];
			if
			:: a != 0 ->
				produced[a] = 1;
				CONSUME(a, 0);
				CONSUME(a, 1);
				kept[m] = 0
			:: else -> skip
			fi;
			m++;
			a = 0
		}
	:: else -> break
	od
}
#endif

/* ------------------------------------------------------------------ */
/* A downstream group: check + effect + delete its own token, atomic.  */
/* ------------------------------------------------------------------ */
proctype Downstream(byte g)
{
	byte a;

	do
	:: atomic {
		CONS(g) ->
		a = 1;
		do
		:: CONS1(a, g) -> break
		:: else -> a++
		od;
		TOK(a, g) = 0; /* only its own group's token row */
		DPROC(att_msg[a], g)++;
		assert(DPROC(att_msg[a], g) <= 1); /* processed at most once */
		a = 0
	   }
	:: ALLDONE && !CONS(g) -> break
	od
}

#ifdef RECOVERY
/* ------------------------------------------------------------------ */
/* The recovery pass (consumer/worker.c maybe_recover, protocol.c       */
/* tbx__proto_recover): finishes rows whose record will not be          */
/* delivered again, through B-E exactly as a redelivery resumes a row.  */
/* The pass takes only rows below the committed offset of its own       */
/* partitions; the model lets it take any row at any time, beside two  */
/* workers that may be handling the same record: a concurrent owner.    */
/* ------------------------------------------------------------------ */
proctype Recovery()
{
	byte m, a;
	bit won;

restart:
	m = 0; a = 0; won = 0;
	do
	:: atomic {
		(row[0] || row[1]) ->
		/* read the row (tbx_outbox_row_load) */
		if
		:: row[0] -> m = 0
		:: row[1] -> m = 1
		fi;
		a = row_att[m]
	   }
#ifdef BUG_RECOVERY_REMINT
		/* a fresh attempt for every row, recorded over the other */
		atomic {
			assert(natt < MAXATT);
			natt++;
			a = natt;
			att_msg[a] = m;
			reg[a] = 1;
			TOK(a, 0) = 1;
			TOK(a, 1) = 1
		}
		CRASH;
		atomic {
			slock == 0 ->
			if
			:: row[m] -> row_att[m] = a
			:: else -> a = 0
			fi
		}
		CRASH;
		if
		:: a == 0 -> goto next
		:: else -> skip
		fi;
#else
		if
		:: a == 0 ->
			/* B: mint, then record WHERE attempt IS NULL */
			atomic {
				assert(natt < MAXATT); /* model bound */
				natt++;
				a = natt;
				att_msg[a] = m;
				reg[a] = 1;
				TOK(a, 0) = 1;
				TOK(a, 1) = 1
			}
			CRASH;
			atomic {
				slock == 0 ->
				if
				:: row[m] && row_att[m] == 0 -> row_att[m] = a; won = 1
				:: else -> won = 0
				fi
			}
			CRASH;
			if
			:: won -> won = 0
			:: else ->
				atomic {
					if
					:: reg[a] -> reg[a] = 0; TOK(a, 0) = 0; TOK(a, 1) = 0
					:: else -> skip
					fi
				}
				CRASH;
				atomic {
					slock == 0 ->
					if
					:: row[m] -> a = row_att[m]
					:: else -> a = 0
					fi
				}
				if
				:: a == 0 -> goto next /* another worker finished it */
				:: else -> skip
				fi
			fi
		:: else -> skip
		fi;
#endif
		/* C: confirm, produce */
		reg[a] = 0;
		CRASH;
		atomic {
			produced[a] = 1;
#ifndef ASYNC_DOWNSTREAM
			CONSUME(a, 0);
			CONSUME(a, 1)
#endif
		}
		CRASH;
		/* D, then E */
		tok_in[m] = 0;
		CRASH;
		atomic { slock == 0 -> row[m] = 0; row_att[m] = 0 }
		CRASH;
next:
		m = 0; a = 0
	:: wdone == NWORK && !row[0] && !row[1] -> break
	od;
	rdone = 1
}
#endif

init
{
	byte i, g;

	atomic {
		inq[0] = 0; inq[1] = 1; inq[2] = 0; /* m0, m1, m0 re-sent */
		tok_in[0] = 1; tok_in[1] = 1;
		run Worker(1);
#if NWORK > 1
		run Worker(2);
#endif
		run Sweeper();
#ifdef RECOVERY
		run Recovery();
#endif
#ifdef GIVEUP
		run Operator();
#endif
#ifdef ASYNC_DOWNSTREAM
		run Downstream(0);
		run Downstream(1);
#endif
		skip
	}
	(_nr_pr == 1);
	/* end state: everything handled exactly once, stores empty */
	atomic {
		assert(in_commit == NIN);
		i = 0;
		do
		:: i < NMSG ->
			assert(effect[i] == 1);
			assert(!row[i] && !tok_in[i]);
			g = 0;
			do
			:: g < NGRP -> assert(DPROC(i, g) == 1); g++
			:: else -> break
			od;
			i++
		:: else -> break
		od;
		i = 1;
		do
		:: i <= MAXATT ->
			assert(!reg[i] && !TOK(i, 0) && !TOK(i, 1));
			i++
		:: else -> break
		od
	}
}
