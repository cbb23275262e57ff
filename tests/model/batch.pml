/*
 * tokenbox with tokens by the batch: a Promela model of the batched
 * protocol of docs/batched-tokens.md (issue 24), checked before any code.
 *
 * One sending service (consumer group G1, two workers W1, W2 sharing the
 * service store S and the token store T) reads one partition holding three
 * records: message 0, message 1 and a re-sent copy of message 0 (same
 * token set, same index).  Messages 0 and 1 were minted by one upstream
 * attempt: G1 has ONE token row for them, a bitmap (in_bits) whose bit m
 * is message m's token.  "The token exists" = its bit is set; consuming
 * clears it; the row is gone when its last bit is cleared (in_bits == 0).
 *
 * A worker takes the next 1..3 records as a batch (every cut is explored).
 * Per batch:
 *   A   one S transaction under the partition's lock (SQLite: the write
 *       lock; PostgreSQL: the tbx_inflight row of the partition, FOR
 *       UPDATE), in three steps with other parties' statements between
 *       them: (1) lock, compare the partition's generation (gen) with the
 *       one the worker remembers and reload its memory of the group's
 *       pending batch rows when they differ; the records covered by a
 *       known row are resumed; (2) read the token bits of the others (T,
 *       one statement); (3) run the handlers of the records whose bit is
 *       set, insert ONE batch row covering them (a fresh row id: never
 *       reused) and bump gen, commit.
 *   then for each row of the batch (the new one and the resumed ones):
 *   B   mint a fresh attempt: one registration and, per downstream group,
 *       one token row (a bitmap over the row's outgoing messages); then
 *       record the attempt in the row WHERE attempt IS NULL; a loser drops
 *       its own attempt (only if still registered) and reloads the row
 *   C   confirm (delete the registration), produce the row's messages
 *   D   clear the row's covered bits in G1's incoming token row: one
 *       UPDATE with a bitwise operation on the row as locked (never a
 *       value read before)
 *   E   delete the batch row
 *   F   commit the offset past the batch
 * A crash (bounded by MAXCRASH) may happen between any two steps: the
 * worker's open transaction rolls back, its lock and memory are lost, and
 * it restarts at the committed offset.  A rebalance (bounded by MAXREB)
 * between batches also restarts the worker at the committed offset and
 * drops its memory of the partition.
 *
 * Both workers read the partition at once: this over-approximates a
 * zombie beside the new owner, and an owner after another owner.  E and
 * B's record do not wait for the partition's lock (PostgreSQL), which
 * also covers SQLite, where they do.
 *
 * Properties: a handler commits at most once (asserted where it commits),
 * a downstream group processes an outgoing message at most once (asserted
 * where it does); at the end: committed offset past every record, every
 * message took effect exactly once in G1 and in each downstream group, no
 * batch row, no incoming bit, no registration, no outgoing bit left.
 *
 * Switches:
 *   NOCRASH / MAXCRASH=n    crash budget (default 2)
 *   MAXREB=n                rebalances in all (default 1)
 *   KEEP_MEMORY             a rebalance keeps the worker's memory and its
 *                           remembered gen (passes: the gen comparison in
 *                           every A is what makes the memory safe)
 * Broken variants, each expected to fail:
 *   BUG_CLEAR_OUTSIDE_D     the bits of the records A will handle are
 *                           cleared at the token check, in a T transaction
 *                           of its own before A commits (not in D's)
 *   BUG_STALE_BITMAP        D writes the bitmap back from a value read in
 *                           an earlier statement (read, then write
 *                           old & ~mask) instead of clearing bits in the
 *                           row as locked
 *   BUG_SHARED_ROW          the downstream token rows are keyed by the
 *                           batch row, not by the attempt: two attempts of
 *                           one batch row share one token row
 *   BUG_TRUST_MEMORY        the resume check trusts the worker's memory
 *                           of pending rows: the gen is compared only when
 *                           the worker (re)starts, not in every A, and a
 *                           rebalance keeps the memory
 */

#ifndef MAXCRASH
#ifdef NOCRASH
#define MAXCRASH 0
#else
#define MAXCRASH 2
#endif
#endif
#ifndef MAXREB
#define MAXREB 1
#endif
#ifdef BUG_TRUST_MEMORY
#define KEEP_MEMORY
#endif

#define NIN     3          /* records in the incoming partition */
#define NMSG    2          /* incoming messages (= outgoing messages) */
#define NGRP    2          /* downstream groups D1, D2 */
#define MAXROW  6          /* batch row ids 1..MAXROW; a bit each in a byte */
#define MAXATT  8          /* attempt ids 1..MAXATT; 0 = none */
#define UNKNOWN 255        /* no remembered gen */

/* ---- incoming topic (one partition) ---- */
byte inq[NIN];             /* record offset -> message */
byte in_commit;            /* G1's committed offset */

/* ---- token store T ---- */
byte in_bits;              /* G1's incoming token row: bit m = message m */
bit  reg[MAXATT + 1];      /* the registration of attempt a (one a row) */
byte att_row[MAXATT + 1];  /* attempt -> the batch row it was minted for */
byte att_set[MAXATT + 1];  /* attempt -> its downstream token row id */
byte oset[(MAXATT + 1) * NGRP]; /* downstream token row (id, group):
				   bitmap over outgoing messages */
byte natt;
#define OSET(s, g) oset[(s) * NGRP + (g)]

/* ---- service store S (G1's) ---- */
byte slock;                /* the partition's lock: 0 free, else worker */
byte gen;                  /* tbx_inflight.gen of the partition */
bit  row[MAXROW + 1];      /* batch row r exists */
byte row_cov[MAXROW + 1];  /* the incoming messages it covers (bitmap);
			      row ids are never reused, so it is kept */
byte row_att[MAXROW + 1];  /* its attempt, 0 = none yet */
byte nrow;
byte effect[NMSG];

/* ---- output topic, downstream ---- */
byte dproc[NMSG * NGRP];
#define DPROC(m, g) dproc[(m) * NGRP + (g)]

byte crashes;
byte rebs;                 /* rebalances so far, all workers */
byte wdone;

/* A crash right after the step it ends (used as the last statement of
 * that step's atomic block): the crashed worker's volatile state is not
 * seen by anyone, so deciding at once loses no interleaving, and it saves
 * a state per crash point. */
#define CRASH \
	if \
	:: crashes < MAXCRASH -> crashes++; goto restart \
	:: true -> skip /* not "else": that would force the crash */ \
	fi

#define ANYREG (reg[1] || reg[2] || reg[3] || reg[4] || reg[5] || reg[6] || \
		reg[7] || reg[8])

/* the batch rows that exist now, as a bitmap over row ids */
#define ROWS ((row[1] << 1) | (row[2] << 2) | (row[3] << 3) | \
	      (row[4] << 4) | (row[5] << 5) | (row[6] << 6))

/* downstream group g processes outgoing message m of attempt a: its own
 * exactly-once step (check its bit, effect, clear its bit) in one go */
#define CONSUME1(a, m, g) \
	if \
	:: (OSET(att_set[a], g) >> (m)) & 1 -> \
		OSET(att_set[a], g) = OSET(att_set[a], g) & ~(1 << (m)); \
		DPROC(m, g)++; \
		assert(DPROC(m, g) <= 1) \
	:: else -> skip /* a copy whose token is gone: dropped */ \
	fi

/* produce every message of attempt a's row (cov): downstream consumes at
 * once (a produced token belongs to a confirmed attempt, so only its own
 * group can clear it afterwards, and later copies are no-ops) */
#define PRODUCE(a, cov) \
	if \
	:: (cov) & 1 -> CONSUME1(a, 0, 0); CONSUME1(a, 0, 1) \
	:: else -> skip \
	fi; \
	if \
	:: (cov) & 2 -> CONSUME1(a, 1, 0); CONSUME1(a, 1, 1) \
	:: else -> skip \
	fi

proctype Worker(byte me)
{
	byte pos, bend, i, m, r, a, cov, todo, cand, tbits, mem, mgen, old;
	bit won;

restart:
	atomic {
		slock = (slock == me -> 0 : slock); /* a dead process holds no
						       lock */
		mem = 0; mgen = UNKNOWN;            /* its memory is gone */
		bend = 0; i = 0; m = 0; r = 0; a = 0; cov = 0; todo = 0;
		cand = 0; tbits = 0; old = 0; won = 0;
		pos = in_commit
	}
	do
	:: pos >= NIN -> break
	:: else ->
		/* ---- A (1): the poll makes the batch of the next 1, 2 or 3
		 * records; the partition's lock; the generation; memory */
		atomic {
			slock == 0 -> slock = me;
			if
			:: bend = pos + 1
			:: pos + 2 <= NIN -> bend = pos + 2
			:: pos + 3 <= NIN -> bend = pos + 3
			fi;
#ifdef BUG_TRUST_MEMORY
			if
			:: mgen == UNKNOWN -> mem = ROWS; mgen = gen
			:: else -> skip
			fi;
#else
			if
			:: gen != mgen -> mem = ROWS; mgen = gen /* reload */
			:: else -> skip
			fi;
#endif
			/* per record: a known row covering it -> resume that
			 * row; else its bit is to be checked */
			todo = 0; cand = 0; i = pos;
			do
			:: i >= bend -> break
			:: else ->
				m = inq[i];
				r = 1;
				do
				:: r > MAXROW -> cand = cand | (1 << m); break
				:: r <= MAXROW && ((mem >> r) & 1) &&
				   ((row_cov[r] >> m) & 1) ->
					todo = todo | (1 << r); break
				:: else -> r++
				od;
				i++
			od;
			i = 0; m = 0; r = 0
		}
		/* ---- A (2): the token check, one statement in T */
#ifdef BUG_CLEAR_OUTSIDE_D
		/* the check clears what it finds, in T's own transaction,
		 * before the handlers' effects commit; a crash then loses
		 * A's transaction, not T's clear */
		atomic {
			tbits = in_bits & cand;
			in_bits = in_bits & ~tbits;
			CRASH
		}
#else
		tbits = in_bits & cand;
#endif
		/* ---- A (3): handlers, one batch row for them, gen; COMMIT */
		atomic {
			if
			:: tbits != 0 ->
				if
				:: tbits & 1 -> effect[0]++;
					assert(effect[0] <= 1) /* at most once */
				:: else -> skip
				fi;
				if
				:: tbits & 2 -> effect[1]++;
					assert(effect[1] <= 1)
				:: else -> skip
				fi;
				assert(nrow < MAXROW); /* model bound */
				nrow++;
				row[nrow] = 1;        /* a fresh row id */
				row_cov[nrow] = tbits;
				row_att[nrow] = 0;
				gen++;
				mgen = gen;           /* our own row: known */
				mem = mem | (1 << nrow);
				todo = todo | (1 << nrow)
			:: else -> skip
			fi;
			cand = 0; tbits = 0;
			slock = 0; /* COMMIT */
			CRASH /* A.committed */
		}

		/* ---- B-E for each row of the batch, one after the other, in
		 * any order */
		do
		:: todo == 0 -> break
		:: else ->
			atomic {
				r = 1;
				do
				:: !((todo >> r) & 1) -> r++
				:: (todo >> r) & 1 -> break /* this one */
				:: ((todo >> r) & 1) && (todo >> (r + 1)) != 0 ->
					r++                 /* or a later one */
				od;
				todo = todo & ~(1 << r);
				/* load the row: gone means finished (E follows
				 * D, which cleared its bits) */
				if
				:: row[r] -> a = row_att[r]; cov = row_cov[r]
				:: else -> a = 0; cov = 0;
					mem = mem & ~(1 << r)
				fi
			}
			if
			:: cov == 0 -> goto next_row
			:: else -> skip
			fi;
			/* ---- B */
			if
			:: a == 0 ->
				/* T: a fresh attempt, its registration, a
				 * token row per downstream group */
				atomic {
					assert(natt < MAXATT); /* model bound */
					natt++;
					a = natt;
					att_row[a] = r;
#ifdef BUG_SHARED_ROW
					att_set[a] = r; /* keyed by the row */
#else
					att_set[a] = a; /* keyed by the attempt */
#endif
					reg[a] = 1;
					OSET(att_set[a], 0) = cov;
					OSET(att_set[a], 1) = cov;
					CRASH /* B.minted */
				}
				/* S: UPDATE ... WHERE attempt IS NULL */
				atomic {
					if
					:: row[r] && row_att[r] == 0 ->
						row_att[r] = a; won = 1
					:: else -> won = 0
					fi;
					CRASH /* B.recorded */
				}
				if
				:: won -> won = 0
				:: else ->
					/* loser: its own attempt's token rows
					 * and registration, if still there */
					atomic {
						if
						:: reg[a] -> reg[a] = 0;
							OSET(att_set[a], 0) = 0;
							OSET(att_set[a], 1) = 0
						:: else -> skip
						fi;
						CRASH
					}
					d_step {
						if
						:: row[r] -> a = row_att[r]
						:: else -> a = 0;
							mem = mem & ~(1 << r)
						fi
					}
					if
					:: a == 0 -> goto next_row
					:: else -> skip
					fi
				fi
			:: else -> skip
			fi;
			/* ---- C: confirm, then produce */
			atomic { reg[a] = 0; CRASH /* C.confirmed */ }
			atomic {
				PRODUCE(a, cov);
				CRASH /* C.produced, C.delivered */
			}
			/* ---- D: clear the row's bits in G1's token row */
#ifdef BUG_STALE_BITMAP
			old = in_bits;               /* SELECT bits ... */
			atomic {
				/* UPDATE ... SET bits = $1: a row already
				 * deleted (no bit left) is not written */
				if
				:: in_bits != 0 -> in_bits = old & ~cov
				:: else -> skip
				fi;
				old = 0;
				CRASH /* D.consumed */
			}
#else
			atomic {
				in_bits = in_bits & ~cov; /* UPDATE ... SET bits
							     = bits & ~mask */
				CRASH /* D.consumed */
			}
#endif
			/* ---- E: delete the batch row */
			atomic {
				row[r] = 0; row_att[r] = 0;
				mem = mem & ~(1 << r);
				CRASH /* E.deleted */
			}
next_row:
			atomic { r = 0; a = 0; cov = 0 }
		od;

		/* ---- F: commit past the batch */
		atomic {
			if
			:: in_commit < bend -> in_commit = bend
			:: else -> skip
			fi;
			pos = bend;
			bend = 0;
			CRASH; /* F.committed */
			/* a rebalance between batches: revoked, then
			 * assigned again */
			if
			:: rebs < MAXREB -> rebs++;
#ifndef KEEP_MEMORY
				mem = 0; mgen = UNKNOWN; /* forgotten */
#endif
				pos = in_commit
			:: true -> skip
			fi
		}
	od;
	wdone++
}

/* Register-cleanup: one registration per attempt, swept as one row. */
#define SAME   0
#define ORPHAN 1
#define LEAVE  2

proctype Sweeper()
{
	byte a, r, verdict;

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
			:: else ->
				r = att_row[a];
				if
				:: row[r] && row_att[r] == a -> verdict = SAME
				:: row[r] && row_att[r] == 0 -> verdict = LEAVE
				:: else -> verdict = ORPHAN
				fi
			fi
		}
		if /* then T, in a transaction of its own */
		:: verdict == SAME -> reg[a] = 0
		:: verdict == ORPHAN ->
			atomic {
				if
				:: reg[a] -> reg[a] = 0;
					OSET(att_set[a], 0) = 0;
					OSET(att_set[a], 1) = 0
				:: else -> skip
				fi
			}
		:: else -> skip
		fi;
		a = 0; r = 0; verdict = 0
	:: wdone == 2 && !ANYREG -> break
	od
}

init
{
	byte i, g;

	atomic {
		inq[0] = 0; inq[1] = 1; inq[2] = 0; /* m0, m1, m0 re-sent */
		in_bits = 3;                        /* one row, two bits */
		run Worker(1);
		run Worker(2);
		run Sweeper()
	}
	(_nr_pr == 1);
	atomic {
		assert(in_commit == NIN);
		assert(in_bits == 0);           /* the token row is gone */
		assert(slock == 0);
		i = 0;
		do
		:: i < NMSG ->
			assert(effect[i] == 1);
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
		:: i <= MAXROW -> assert(!row[i]); i++
		:: else -> break
		od;
		i = 1;
		do
		:: i <= MAXATT ->
			assert(!reg[i] && OSET(i, 0) == 0 && OSET(i, 1) == 0);
			i++
		:: else -> break
		od
	}
}
