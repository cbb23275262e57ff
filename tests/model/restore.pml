/*
 * A token store restored from an older backup (docs/architecture.md,
 * "Token-store identity"; docs/model.md, "A restored token store").
 *
 * A restored store keeps its id and loses the tokens and the numbers
 * (tbx-seq) it issued after the backup, while the records minted then
 * are still in Kafka.  A worker that finds a record's token absent must
 * tell "consumed here" (drop: the work was done) from "never issued by
 * this store's history" (dead-letter as a store mismatch).  Numbers are
 * issued in ranges: every open of the store closes the open range at the
 * sequence's value and starts a new one at lo = max(value + 1, now * K),
 * where now is the wall clock in ticks and a history issues fewer than K
 * numbers per tick (tokenbox: milliseconds × 2^20).  A number is issued
 * by this history when a range holds it; an absent token with a number no
 * range holds was never issued here.
 *
 * Scenario.  The original history opens the store, mints m0 and may
 * handle it; a backup is taken while it runs; the lost history goes on
 * (maybe restarting: another open), mints m1 and maybe m2, may handle
 * them.  The store is restored (the business state with it: the backup
 * holds S and T of one point in time), later in time.  The restored
 * history runs a worker W — it opens the store, and takes a number at the
 * start of every A (the joined path) before judging its record — over
 * every record in Kafka, each record possibly delivered twice, and a
 * sender P that opens the store and mints m3 while W runs.
 *
 * Properties, at the moment a record is judged:
 *   - a handled record's effect is not in the state yet (at most once);
 *   - a record dropped as consumed has its effect in the state (a missing
 *     token proves the work was done);
 *   - a record dead-lettered as never issued has no effect in the state
 *     (otherwise its replay would apply it twice).
 *
 * Broken variants:
 *   BUG_NO_RANGES      one counter, "never issued" = above its value (the
 *                      check before ranges): the restored store issues the
 *                      lost numbers again
 *   BUG_FIXED_JUMP     an open jumps a fixed distance instead of to the
 *                      clock: the lost history's restart and the restored
 *                      history's open start the same range
 *   BUG_UNLOCKED_JUMP  the open reads the value, then closes the range and
 *                      sets the sequence in a second step, without
 *                      excluding the issuers (PostgreSQL's nextval without
 *                      the exclusive subscription lock)
 *   BUG_CLOCK_BACK     the restored history's clock is behind the lost
 *                      history's: the assumption the design rests on
 */

#define K 4	  /* a history issues fewer than K numbers per tick */
#define NMSG 4	  /* m0 .. m3 */
#define NR 5	  /* ranges */
#define OPEN 255  /* the open range's hi */

typedef store_t {
	byte val;	   /* the sequence's last value */
	byte nr;	   /* ranges in use; the last one is open */
	byte lo[NR];
	byte hi[NR];
	bool tok[NMSG];	   /* the group's token of message m */
	bool applied[NMSG] /* the handler's effect, in S */
};

store_t s, bak;
byte now = 1;		/* the wall clock, in ticks; never goes back */
byte rseq[NMSG];	/* Kafka: record m carries tbx-seq rseq[m] */
byte nrec = 0;		/* records in Kafka (m0 .. nrec-1) */
bool sent_done = false;

/* The clock moves on with the numbers: fewer than K per tick. */
inline issue(n)
{
	s.val++;
	n = s.val;
	if
	:: s.val >= (now + 1) * K -> now = s.val / K
	:: else -> skip
	fi
}

inline close_and_start(r, l)
{
	assert(s.nr < NR);
	if
	:: s.nr > 0 -> s.hi[s.nr - 1] = r
	:: else -> skip
	fi;
#ifdef BUG_FIXED_JUMP
	l = r + 1 + K;
#else
	l = now * K;
	if
	:: l < r + 1 -> l = r + 1
	:: else -> skip
	fi;
#endif
	s.lo[s.nr] = l;
	s.hi[s.nr] = OPEN;
	s.nr++;
	s.val = l - 1
}

/* An open of the store: a new range, under the sequence's write lock. */
inline open_store(r, l)
{
#ifdef BUG_NO_RANGES
	skip
#elif defined(BUG_UNLOCKED_JUMP)
	r = s.val; /* last_value read; nextval may run before the next step */
	d_step { close_and_start(r, l) }
#else
	d_step { r = s.val; close_and_start(r, l) }
#endif
}

inline issued(n, res, i)
{
#ifdef BUG_NO_RANGES
	res = (n <= s.val)
#else
	res = false;
	i = 0;
	do
	:: i < s.nr ->
		if
		:: s.lo[i] <= n && ((s.hi[i] != OPEN && n <= s.hi[i]) ||
				    (s.hi[i] == OPEN && n <= s.val)) -> res = true
		:: else -> skip
		fi;
		i++
	:: else -> break
	od
#endif
}

/* Mints the next message: a number, its token, its record in Kafka. */
inline mint(n)
{
	d_step {
		issue(n);
		s.tok[nrec] = true;
		rseq[nrec] = n;
		nrec++
	}
}

/* A's judgement of record m (the joined path took its number before). */
inline judge(m, res, i)
{
	d_step {
		if
		:: s.tok[m] ->
			assert(!s.applied[m]);
			s.applied[m] = true;
			s.tok[m] = false
		:: else ->
			issued(rseq[m], res, i);
			if
			:: res -> assert(s.applied[m])	/* dropped: done before */
			:: else -> assert(!s.applied[m]) /* dead-lettered */
			fi
		fi
	}
}

inline copy(to, from, i)
{
	to.val = from.val;
	to.nr = from.nr;
	i = 0;
	do
	:: i < NR -> to.lo[i] = from.lo[i]; to.hi[i] = from.hi[i]; i++
	:: else -> break
	od;
	i = 0;
	do
	:: i < NMSG -> to.tok[i] = from.tok[i]; to.applied[i] = from.applied[i]; i++
	:: else -> break
	od
}

/* The clock ticks at any time. */
proctype Clock()
{
	atomic { now < 250 -> now++ }
}

proctype Sender()
{
	byte n, r, l;

	open_store(r, l);
	mint(n);
	sent_done = true
}

proctype Worker()
{
	byte n, r, l, m = 0, i;
	bool res, again;

	open_store(r, l);
	do
	:: m < nrec ->
		again = false;
next:		skip;
		d_step { issue(n) };	/* A's number, before the check */
		judge(m, res, i);
		if
		:: !again -> again = true; goto next /* delivered again */
		:: true -> skip
		fi;
		m++
	:: m == nrec && sent_done -> break
	od
}

init {
	byte n, r, l, i;
	bool res;

	/* The original history. */
	open_store(r, l);
	mint(n);
	if
	:: d_step { issue(n) }; judge(0, res, i)
	:: skip
	fi;
	/* A backup while it runs; then the lost history goes on. */
	d_step { copy(bak, s, i) };
	if
	:: now++; open_store(r, l) /* a restart */
	:: skip
	fi;
	mint(n);
	if
	:: mint(n)
	:: skip
	fi;
	if
	:: d_step { issue(n) }; judge(1, res, i)
	:: skip
	fi;
	/* The restore, later: S and T of the backup's time. */
	d_step {
		copy(s, bak, i);
#ifdef BUG_CLOCK_BACK
		now = 1
#else
		now++
#endif
	};
	atomic { run Worker(); run Sender(); run Clock() }
}
