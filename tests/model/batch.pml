/*
 * tokenbox with tokens by the batch: a Promela model of the batched
 * protocol as built (docs/batched-tokens.md, issue 24): the worker with
 * outbox.layout = batch, consumer/proto_obatch.c, proto_process.c,
 * proto_record.c, proto_finish.c, on PostgreSQL (outbox/pg_batch.c) and
 * SQLite (outbox/sqlite_batch.c).
 *
 * One sending service (consumer group G1; workers sharing the service
 * store S and the token store T) reads records of three kinds:
 *   FSET  a batched record: its token is bit m of G1's ONE token row of
 *         the upstream attempt (in_bits); "the token exists" = the bit is
 *         set; consuming clears it; the row is gone with its last bit
 *   FTOK  a record in the per-message format: its token is its row of
 *         tbx_tokens (bit m of tok)
 *   FUNT  an untokened record (ingress.untokened = offsets): judged by
 *         the partition's ingress offset
 * Each handled message queues one outgoing message for two downstream
 * groups D1, D2.  The configurations (one at a time):
 *   (default)  partition P0: m0, m1, a re-sent copy of m0, all FSET (one
 *              token row, two bits); W1 and W2 both read P0
 *   PERMSG     P0: m0 (FSET), m1 (FTOK); P1: a copy of m1 (FTOK) that
 *              arrived on another partition; W1 reads P0, W2 reads P1
 *   UNTOK      P0: m0 (FUNT), m1 (FTOK) whose tbx_outbox row (the record
 *              layout's, A committed by an older worker: handled once,
 *              token still there) is pending; W1 and W2 both read P0
 *
 * A worker takes the next 1..3 records of its partition as a batch (every
 * cut is explored).  Per batch, as the code does it:
 *   A   one S transaction, in steps with other parties' statements
 *       between them:
 *       (1) the advisory locks on (G1, tbx-id) of the batch's FTOK
 *           records (PostgreSQL's lock_ids; FSET and FUNT records take
 *           none), then the partition's lock (gens_lock: the tbx_inflight
 *           row made if missing, INSERT ... ON CONFLICT DO NOTHING, then
 *           locked FOR UPDATE; SQLite: the file's write lock), gen read
 *           under it and the memory of pending batch rows reloaded when
 *           gen differs from the remembered one; tbx_cover_msg read for
 *           the FTOK records (cover_msg_find), the tbx_outbox rows read
 *           (rows_find).  Per record, in batch order: a copy of a record
 *           earlier in the batch joins it; a tbx_outbox row covering it
 *           -> resume that row; FTOK named in tbx_cover_msg -> resume
 *           that batch row; otherwise the memory: FSET by its bit, then
 *           every record by its (partition, offset) -> resume the row;
 *           otherwise FUNT by the ingress offset (below: dropped, else
 *           handled), FSET and FTOK by their token, read in (2)
 *       (2) the tokens: the bits and the per-message tokens (T)
 *       (3) the handlers of the records whose token exists and of the
 *           untokened ones above the ingress offset (which moves past
 *           them); ONE batch row covering them (a fresh row id: never
 *           reused) with its tbx_cover_msg entries (an entry the group
 *           has already fails the transaction: rolled back); gen + 1; the
 *           rows resumed are loaded (a row gone: its records dropped);
 *           COMMIT
 *   B   for the batch's rows without an attempt (the new one, resumed
 *       ones): one T transaction mints a fresh attempt per row (one
 *       registration, and per downstream group one token row keyed by
 *       the attempt); then one S transaction records each WHERE attempt
 *       IS NULL; a loser drops its own attempt (if still registered) and
 *       goes on with the winner's, or finds the row gone
 *   C   confirm (the rows' registrations deleted), produce every row's
 *       messages
 *   D   one T transaction deletes the rows' per-message tokens, one
 *       clears their bits in G1's token row (an UPDATE ... SET bits =
 *       bits & ~mask on the row as locked, never a value read before)
 *   E   delete the batch's rows, with their tbx_cover_msg entries
 *   F   commit the offset past the batch
 * Joined (JOINED: one file or one database for both stores): A mints the
 * new row's attempt and its token rows with the row, unregistered; C
 * confirms nothing; D and E are one transaction.
 *
 * A crash (bounded by MAXCRASH) may happen after any step that persists
 * something: the worker's open transaction rolls back, its locks and
 * memory are lost, and it restarts at the committed offset.  A rebalance
 * (bounded by MAXREB) between batches also restarts the worker at the
 * committed offset and drops its memory.
 *
 * Two workers reading one partition over-approximate a zombie beside the
 * new owner, and an owner after another.  E, B's record, D and C take no
 * partition lock (PostgreSQL), which also covers SQLite, where they wait
 * for the file's lock.
 *
 * Properties: a handler commits at most once (asserted where it
 * commits), a downstream group processes an outgoing message at most
 * once (asserted where it does); at the end: committed offsets past every
 * record, every message took effect exactly once in G1 and in each
 * downstream group, no batch row, tbx_outbox row, tbx_cover_msg entry,
 * incoming bit or token, registration, outgoing bit or lock left.
 *
 * Switches:
 *   NOCRASH / MAXCRASH=n    crash budget (default 2)
 *   MAXREB=n                rebalances in all (default 1)
 *   KEEP_MEMORY             a rebalance keeps the worker's memory and its
 *                           remembered gen (passes: the gen comparison in
 *                           every A is what makes the memory safe)
 *   PERMSG, UNTOK           the configurations above
 *   JOINED                  the joined path
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
 *   BUG_TOKEN_BEFORE_LOCK   the tokens are read before the partition's
 *                           lock (prefetch() before tbx__ob_prepare())
 *   BUG_GEN_UNLOCKED        gen is read without a lock (gens_get instead
 *                           of gens_lock): a FSET record is ordered by
 *                           nothing
 *   BUG_NO_ENSURE           gens_lock without its INSERT ... ON CONFLICT
 *                           DO NOTHING: a partition without a tbx_inflight
 *                           row (gen 0, its marker deleted) is not locked
 *   BUG_NO_COVER_MSG        (PERMSG) a FTOK record is resume-checked only
 *                           against memory and gen (by its offset), not
 *                           through tbx_cover_msg
 *   BUG_NO_MSG_LOCK         (PERMSG) a FTOK record takes no advisory lock
 *   BUG_UNTOKENED_BY_INGRESS (UNTOK) a FUNT record is judged by the
 *                           ingress offset alone, not looked up in memory
 *                           by its offset first
 *   BUG_NO_RECORD_ROWS      (UNTOK) the batch worker does not read
 *                           tbx_outbox rows
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

#define FSET 0
#define FTOK 1
#define FUNT 2

#ifdef PERMSG
#define NPART 2
#else
#define NPART 1
#endif
#define NIN     3          /* record slots per partition */
#define NSLOT   (NPART * NIN)
#define NMSG    2          /* incoming messages (= outgoing messages) */
#define NGRP    2          /* downstream groups D1, D2 */
#define MAXROW  6          /* row ids 1..MAXROW; a bit each in a byte */
#define MAXATT  8          /* attempt ids 1..MAXATT; 0 = none */
#define UNKNOWN 255        /* no remembered gen */
#if defined(PENDING_BIT) && !defined(PERMSG) && !defined(UNTOK)
#define PENDING 4          /* the token row's third bit: a message of the
			      upstream attempt not read in the model */
#else
#define PENDING 0
#endif

/* ---- incoming topic ---- */
byte inq[NSLOT];           /* slot p * NIN + offset -> message */
byte nin[NPART];           /* records in partition p */
byte in_commit[NPART];     /* G1's committed offsets */
byte mfmt[NMSG];           /* FSET, FTOK or FUNT */
byte setmsgs, tokmsgs;     /* the FSET and FTOK messages, bitmaps */

/* ---- token store T ---- */
byte in_bits;              /* G1's incoming token row: bit m = FSET m */
byte tok;                  /* G1's per-message tokens: bit m = FTOK m */
bit  reg[MAXATT + 1];      /* the registration of attempt a (one row) */
byte att_row[MAXATT + 1];  /* attempt -> the row it was minted for */
byte att_set[MAXATT + 1];  /* attempt -> its downstream token row id */
byte oset[(MAXATT + 1) * NGRP]; /* downstream token row (id, group):
				   bitmap over outgoing messages */
byte natt;
#define OSET(s, g) oset[(s) * NGRP + (g)]

/* ---- service store S (G1's) ---- */
byte plock[NPART];         /* the partition's lock: 0 free, else worker */
byte mlock[NMSG];          /* the advisory lock on (G1, tbx-id) */
byte gen[NPART];           /* tbx_inflight.gen */
byte ingress[NPART];       /* the ingress offset: next untokened offset */
bit  row[MAXROW + 1];      /* row r exists (batch row or tbx_outbox row) */
byte recrows;              /* which row ids are tbx_outbox rows (bitmap) */
byte row_cm[MAXROW + 1];   /* the messages a row covers (bitmap); row ids
			      are never reused, so it is kept */
byte row_cs[MAXROW + 1];   /* the slots of its cover entries (bitmap) */
byte row_att[MAXROW + 1];  /* its attempt, 0 = none yet */
byte cover_msg[NMSG];      /* tbx_cover_msg: FTOK message -> batch row */
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

/* the rows that exist now, as a bitmap over row ids */
#define ALLROWS ((row[1] << 1) | (row[2] << 2) | (row[3] << 3) | \
		 (row[4] << 4) | (row[5] << 5) | (row[6] << 6))
/* the batch rows (tbx_obatch) among them: what a reload of memory reads */
#define ROWS (ALLROWS & ~recrows)

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

/* the advisory locks of the FTOK messages t (NMSG == 2) are free */
#define MFREE(t) ((!((t) & 1) || mlock[0] == 0) && \
		  (!((t) & 2) || mlock[1] == 0))

/* the lowest row id set in bitmap b, into r (0 when none) */
#define FIRSTROW(b, r) \
	r = 1; \
	do \
	:: r > MAXROW -> r = 0; break \
	:: r <= MAXROW && ((b) >> r) & 1 -> break \
	:: else -> r++ \
	od

proctype Worker(byte me; byte p)
{
	byte pos, bend, i, s, m, r, a, todo, nob, cand, cslots, hslots,
	     dec, tbits, mem, mgen, old, lost, abase, acnt, mask;
#ifdef BUG_TOKEN_BEFORE_LOCK
	byte pre;
#endif

restart:
	atomic {
		/* a dead process holds no lock */
		plock[p] = (plock[p] == me -> 0 : plock[p]);
		mlock[0] = (mlock[0] == me -> 0 : mlock[0]);
		mlock[1] = (mlock[1] == me -> 0 : mlock[1]);
		mem = 0; mgen = UNKNOWN;            /* its memory is gone */
		bend = 0; i = 0; s = 0; m = 0; r = 0; a = 0; todo = 0;
		nob = 0; cand = 0; cslots = 0; hslots = 0; dec = 0;
		tbits = 0; old = 0; lost = 0; abase = 0; acnt = 0; mask = 0;
#ifdef BUG_TOKEN_BEFORE_LOCK
		pre = 0;
#endif
		pos = in_commit[p]
	}
	do
	:: pos >= nin[p] -> break
	:: else ->
#ifdef BUG_TOKEN_BEFORE_LOCK
		/* prefetch() before the locks: every token of the batch */
		pre = in_bits | tok;
#endif
		/* ---- A (1): the poll's cut; the locks; gen; memory; the
		 * look-ups of S; the decision per record */
		atomic {
			if
			:: bend = pos + 1
			:: pos + 2 <= nin[p] -> bend = pos + 2
			:: pos + 3 <= nin[p] -> bend = pos + 3
			fi;
			/* lock_ids(): the batch's FTOK records */
			mask = 0; i = pos;
			do
			:: i >= bend -> break
			:: else ->
				m = inq[p * NIN + i];
				if
				:: mfmt[m] == FTOK -> mask = mask | (1 << m)
				:: else -> skip
				fi;
				i++
			od;
#ifndef BUG_NO_MSG_LOCK
			MFREE(mask) -> /* waits, atomicity broken meanwhile */
			if
			:: mask & 1 -> mlock[0] = me
			:: else -> skip
			fi;
			if
			:: mask & 2 -> mlock[1] = me
			:: else -> skip
			fi;
#endif
			/* gens_lock(): the partition's row made if missing and
			 * locked, its gen read under the lock */
#if defined(BUG_GEN_UNLOCKED)
			skip; /* gens_get: a plain read */
#elif defined(BUG_NO_ENSURE)
			if
			:: gen[p] > 0 -> plock[p] == 0 -> plock[p] = me
			:: else -> skip /* no row: FOR UPDATE locks nothing */
			fi;
#else
			plock[p] == 0 -> plock[p] = me;
#endif
#ifdef BUG_TRUST_MEMORY
			if
			:: mgen == UNKNOWN -> mem = ROWS; mgen = gen[p]
			:: else -> skip
			fi;
#else
			if
			:: gen[p] != mgen -> mem = ROWS; mgen = gen[p] /* reload */
			:: else -> skip
			fi;
#endif
			/* per record, in batch order */
			todo = 0; cand = 0; cslots = 0; hslots = 0; dec = 0;
			i = pos;
			do
			:: i >= bend -> break
			:: else ->
				s = p * NIN + i;
				m = inq[s];
				if
				:: (dec >> m) & 1 -> goto decided /* a copy of
					a record earlier in the batch: joins */
				:: else -> dec = dec | (1 << m)
				fi;
#ifndef BUG_NO_RECORD_ROWS
				/* rows_find(): a tbx_outbox row first */
				r = 1;
				do
				:: r > MAXROW -> break
				:: r <= MAXROW && row[r] && ((recrows >> r) & 1) &&
				   ((row_cm[r] >> m) & 1) ->
					todo = todo | (1 << r); goto decided
				:: else -> r++
				od;
#endif
#ifndef BUG_NO_COVER_MSG
				/* cover_msg_find(): a FTOK record's batch row */
				if
				:: mfmt[m] == FTOK && cover_msg[m] != 0 ->
					todo = todo | (1 << cover_msg[m]);
					goto decided
				:: else -> skip
				fi;
#endif
				/* the memory (tbx__resume_mem_check()): a FSET
				 * record by its bit, then every record by its
				 * (partition, offset) */
				r = 1;
				do
				:: r > MAXROW -> break
				:: r <= MAXROW && ((mem >> r) & 1) &&
				   ((mfmt[m] == FSET && ((row_cm[r] >> m) & 1))
#ifndef BUG_UNTOKENED_BY_INGRESS
				    || ((row_cs[r] >> s) & 1)
#else
				    || (mfmt[m] != FUNT && ((row_cs[r] >> s) & 1))
#endif
				   ) ->
					todo = todo | (1 << r); goto decided
				:: else -> r++
				od;
				/* not covered: the ingress offset, or the token */
				if
				:: mfmt[m] == FUNT && i < ingress[p] -> skip
				:: mfmt[m] == FUNT && i >= ingress[p] ->
					hslots = hslots | (1 << s)
				:: mfmt[m] != FUNT ->
					cand = cand | (1 << m);
					cslots = cslots | (1 << s)
				fi;
decided:
				i++
			od;
			i = 0; s = 0; m = 0; r = 0; mask = 0; dec = 0
		}
		/* ---- A (2): the token check, in T */
#ifdef BUG_CLEAR_OUTSIDE_D
		/* the check clears what it finds, in T's own transaction,
		 * before the handlers' effects commit; a crash then loses
		 * A's transaction, not T's clear */
		atomic {
			tbits = (in_bits | tok) & cand;
			in_bits = in_bits & ~tbits;
			tok = tok & ~tbits;
			CRASH
		}
#elif defined(BUG_TOKEN_BEFORE_LOCK)
		atomic { tbits = pre & cand; pre = 0 }
#else
		tbits = (in_bits | tok) & cand;
#endif
		/* ---- A (3): handlers, one batch row for them, gen; the
		 * resumed rows loaded; COMMIT */
		atomic {
			/* the handled: their messages and slots */
			i = 0;
			do
			:: i >= NSLOT -> break
			:: else ->
				if
				:: ((cslots >> i) & 1) && ((tbits >> inq[i]) & 1) ->
					hslots = hslots | (1 << i)
				:: else -> skip
				fi;
				i++
			od;
			mask = 0; i = 0;
			do
			:: i >= NSLOT -> break
			:: else ->
				if
				:: (hslots >> i) & 1 -> mask = mask | (1 << inq[i])
				:: else -> skip
				fi;
				i++
			od;
			/* the tbx_cover_msg entries of its FTOK records: one
			 * the group has already fails the transaction */
			if
			:: ((mask & tokmsgs & 1) && cover_msg[0] != 0) ||
			   ((mask & tokmsgs & 2) && cover_msg[1] != 0) ->
				goto restart /* rolled back; redelivered */
			:: else -> skip
			fi;
			if
			:: mask != 0 ->
				if
				:: mask & 1 -> effect[0]++;
					assert(effect[0] <= 1) /* at most once */
				:: else -> skip
				fi;
				if
				:: mask & 2 -> effect[1]++;
					assert(effect[1] <= 1)
				:: else -> skip
				fi;
				assert(nrow < MAXROW); /* model bound */
				nrow++;
				row[nrow] = 1;        /* a fresh row id */
				row_cm[nrow] = mask;
				row_cs[nrow] = hslots;
				row_att[nrow] = 0;
				if
				:: mask & tokmsgs & 1 -> cover_msg[0] = nrow
				:: else -> skip
				fi;
				if
				:: mask & tokmsgs & 2 -> cover_msg[1] = nrow
				:: else -> skip
				fi;
				/* the ingress offset past the untokened */
				i = 0;
				do
				:: i >= NIN -> break
				:: else ->
					if
					:: (hslots >> (p * NIN + i)) & 1 &&
					   ingress[p] <= i -> ingress[p] = i + 1
					:: else -> skip
					fi;
					i++
				od;
#ifdef JOINED
				/* the row's attempt and its token rows, made
				 * with it, unregistered */
				assert(natt < MAXATT);
				natt++;
				att_row[natt] = nrow;
#ifdef BUG_SHARED_ROW
				att_set[natt] = nrow;
#else
				att_set[natt] = natt;
#endif
				OSET(att_set[natt], 0) = mask;
				OSET(att_set[natt], 1) = mask;
				row_att[nrow] = natt;
#endif
				gen[p]++;
				mgen = gen[p];        /* our own row: known */
				mem = mem | (1 << nrow);
				todo = todo | (1 << nrow)
			:: else -> skip
			fi;
			/* the rows resumed, loaded: gone means finished (E
			 * follows D, which consumed their tokens) */
			mem = mem & ~(todo & ~ALLROWS);
			todo = todo & ALLROWS;
			nob = 0; r = 1;
			do
			:: r > MAXROW -> break
			:: else ->
				if
				:: ((todo >> r) & 1) && row_att[r] == 0 ->
					nob = nob | (1 << r)
				:: else -> skip
				fi;
				r++
			od;
			cand = 0; cslots = 0; hslots = 0; tbits = 0; mask = 0;
			i = 0; r = 0;
			/* COMMIT: the locks go */
			plock[p] = (plock[p] == me -> 0 : plock[p]);
			mlock[0] = (mlock[0] == me -> 0 : mlock[0]);
			mlock[1] = (mlock[1] == me -> 0 : mlock[1]);
			CRASH /* A.committed */
		}

		/* ---- B: the rows without an attempt */
		if
		:: nob != 0 ->
			/* T: per row a fresh attempt, its registration, a
			 * token row per downstream group */
			atomic {
				abase = natt + 1; acnt = 0;
				r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: (nob >> r) & 1 ->
						assert(natt < MAXATT); /* bound */
						natt++;
						acnt++;
						att_row[natt] = r;
#ifdef BUG_SHARED_ROW
						att_set[natt] = r; /* by the row */
#else
						att_set[natt] = natt;
#endif
						reg[natt] = 1;
						OSET(att_set[natt], 0) = row_cm[r];
						OSET(att_set[natt], 1) = row_cm[r]
					:: else -> skip
					fi;
					r++
				od;
				r = 0;
				CRASH /* B.minted */
			}
			/* S: UPDATE ... WHERE attempt IS NULL, each row */
			atomic {
				lost = 0; a = abase;
				do
				:: a >= abase + acnt -> break
				:: else ->
					r = att_row[a];
					if
					:: row[r] && row_att[r] == 0 -> row_att[r] = a
					:: else -> lost = lost | (1 << (a - abase))
					fi;
					a++
				od;
				a = 0; r = 0;
				CRASH /* B.recorded */
			}
			if
			:: lost != 0 ->
				/* losers: their own attempts' token rows and
				 * registrations, if still there; then the
				 * winner's attempt (C reads it from the row) */
				atomic {
					a = abase;
					do
					:: a >= abase + acnt -> break
					:: else ->
						if
						:: ((lost >> (a - abase)) & 1) && reg[a] ->
							reg[a] = 0;
							OSET(att_set[a], 0) = 0;
							OSET(att_set[a], 1) = 0
						:: else -> skip
						fi;
						a++
					od;
					a = 0; lost = 0;
					CRASH
				}
			:: else -> skip
			fi;
			atomic { nob = 0; abase = 0; acnt = 0 }
		:: else -> skip
		fi;
		if
		:: todo != 0 ->
#ifndef JOINED
			/* ---- C: confirm, then produce */
			atomic {
				r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: ((todo >> r) & 1) && row[r] ->
						reg[row_att[r]] = 0
					:: else -> skip
					fi;
					r++
				od;
				r = 0;
				CRASH /* C.confirmed */
			}
#endif
			atomic {
				r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: ((todo >> r) & 1) && row[r] ->
						assert(row_att[r] != 0);
						PRODUCE(row_att[r], row_cm[r])
					:: else -> skip
					fi;
					r++
				od;
				r = 0;
				/* D's masks, from the rows' covers */
				mask = 0; r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: (todo >> r) & 1 -> mask = mask | row_cm[r]
					:: else -> skip
					fi;
					r++
				od;
				r = 0;
				CRASH /* C.produced, C.delivered */
			}
#ifdef JOINED
			/* ---- D+E: one transaction */
			atomic {
				tok = tok & ~(mask & tokmsgs);
				in_bits = in_bits & ~(mask & setmsgs);
				r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: (todo >> r) & 1 -> row[r] = 0; row_att[r] = 0
					:: else -> skip
					fi;
					r++
				od;
				cover_msg[0] = ((todo >> cover_msg[0]) & 1 -> 0 :
						cover_msg[0]);
				cover_msg[1] = ((todo >> cover_msg[1]) & 1 -> 0 :
						cover_msg[1]);
				mem = mem & ~todo;
				r = 0; mask = 0;
				CRASH /* E.deleted */
			}
#else
			/* ---- D: the per-message tokens, one T transaction */
			if
			:: mask & tokmsgs ->
				atomic {
					tok = tok & ~(mask & tokmsgs);
					CRASH
				}
			:: else -> skip
			fi;
			/* ---- D: the bits, one T transaction */
			if
			:: mask & setmsgs ->
#ifdef BUG_STALE_BITMAP
				old = in_bits;               /* SELECT bits ... */
				atomic {
					/* UPDATE ... SET bits = $1: a row
					 * already deleted (no bit left) is
					 * not written */
					if
					:: in_bits != 0 ->
						in_bits = old & ~(mask & setmsgs)
					:: else -> skip
					fi;
					old = 0;
					CRASH /* D.consumed */
				}
#else
				atomic {
					/* UPDATE ... SET bits = bits & ~mask */
					in_bits = in_bits & ~(mask & setmsgs);
					CRASH /* D.consumed */
				}
#endif
			:: else -> skip
			fi;
			/* ---- E: the rows and their tbx_cover_msg entries */
			atomic {
				r = 1;
				do
				:: r > MAXROW -> break
				:: else ->
					if
					:: (todo >> r) & 1 -> row[r] = 0; row_att[r] = 0
					:: else -> skip
					fi;
					r++
				od;
				cover_msg[0] = ((todo >> cover_msg[0]) & 1 -> 0 :
						cover_msg[0]);
				cover_msg[1] = ((todo >> cover_msg[1]) & 1 -> 0 :
						cover_msg[1]);
				mem = mem & ~todo;
				r = 0; mask = 0;
				CRASH /* E.deleted */
			}
#endif
		:: else -> skip
		fi;

		/* ---- F: commit past the batch */
		atomic {
			todo = 0;
			if
			:: in_commit[p] < bend -> in_commit[p] = bend
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
				pos = in_commit[p]
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
		i = 0;
		do
		:: i >= NSLOT -> break
		:: else -> inq[i] = 0; i++
		od;
#if defined(PERMSG)
		/* P0: m0 (a bit), m1 (per message); P1: a copy of m1 */
		mfmt[0] = FSET; mfmt[1] = FTOK;
		inq[0] = 0; inq[1] = 1; nin[0] = 2;
		inq[NIN + 0] = 1; nin[1] = 1;
		in_bits = 1; tok = 2;
#elif defined(UNTOK)
		/* P0: m0 untokened, m1 per message with a pending
		 * tbx_outbox row (row 1): handled once, its token there */
		mfmt[0] = FUNT; mfmt[1] = FTOK;
		inq[0] = 0; inq[1] = 1; nin[0] = 2;
		tok = 2;
		row[1] = 1; recrows = 2; row_cm[1] = 2; row_cs[1] = 2;
		nrow = 1; effect[1] = 1;
#else
		/* P0: m0, m1, m0 re-sent; one token row, two bits */
		mfmt[0] = FSET; mfmt[1] = FSET;
		inq[0] = 0; inq[1] = 1; inq[2] = 0; nin[0] = 3;
		in_bits = 3 | PENDING;
#endif
		i = 0;
		do
		:: i >= NMSG -> break
		:: else ->
			if
			:: mfmt[i] == FSET -> setmsgs = setmsgs | (1 << i)
			:: mfmt[i] == FTOK -> tokmsgs = tokmsgs | (1 << i)
			:: else -> skip
			fi;
			i++
		od;
#ifdef PERMSG
		run Worker(1, 0);
		run Worker(2, 1);
#else
		run Worker(1, 0);
		run Worker(2, 0);
#endif
		run Sweeper()
	}
	(_nr_pr == 1);
	atomic {
		i = 0;
		do
		:: i < NPART ->
			assert(in_commit[i] == nin[i]);
			assert(plock[i] == 0);
			i++
		:: else -> break
		od;
		assert(in_bits == PENDING);     /* the token row is gone */
		assert(tok == 0);
		assert(mlock[0] == 0 && mlock[1] == 0);
		assert(cover_msg[0] == 0 && cover_msg[1] == 0);
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
