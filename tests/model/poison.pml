/*
 * tokenbox poison isolation (phase G): a Promela model (see docs/model.md).
 *
 * One worker reads two partitions of two records each.  A poison record's
 * handler kills the process whenever it runs; besides, the process may be
 * killed anywhere (bounded by MAXKILL).  The worker is restarted after
 * every death.  Batches are cut every possible way: each batch holds any
 * number of the next records of each partition.
 *
 * The guard of consumer/proto_guard.c (phase_guard, tbx__guard_clear) is
 * kept in S per partition: the A in progress (first, last), whether it
 * covered one record and no other of any partition (lone), the suspect
 * range, and the count of lone deaths of one record.  While a partition of the batch
 * is suspect, A takes one record of the whole batch.  A record whose lone
 * deaths reach LIMIT (retry.max) is dead-lettered without its handler.
 *
 * Properties: a dead-lettered record is a poison record (no innocent
 * record is blamed); a poison handler runs at most 1 + LIMIT times; at the
 * end every innocent record took effect once and every poison record is
 * dead-lettered.
 *
 * Broken variant (compile with -D...):
 *   BUG_PER_PARTITION   the guard as it was: each suspect partition gives
 *                       the batch its first record, and a death counts
 *                       against every partition's single-record range
 * Switches: POISON1 (which records are poison: bit mask, default record 1
 * of partition 0 and record 1 of partition 1), MAXKILL (default 1).
 */

#define NP    2            /* partitions */
#define NR    2            /* records per partition */
#define LIMIT 2            /* retry.max */
#ifndef MAXKILL
#define MAXKILL 1
#endif
#ifndef POISON
#define POISON 10          /* bit mask over r = p * NR + i: records 1 and 3 */
#endif
#define R(p, i) ((p) * NR + (i))

bit  poison[NP * NR];
byte committed[NP];        /* Kafka: next record of each partition */
/* S: tbx_inflight per partition */
short first[NP], last[NP], suspect[NP], cnt_off[NP];
bit  lone[NP];
byte crashes[NP];
/* S: effects */
bit  handled[NP * NR], dead[NP * NR];
/* bookkeeping */
byte runs[NP * NR];
byte kills;
bit  over;

#define KILL \
	if \
	:: kills < MAXKILL -> kills++; goto restart \
	:: true -> skip \
	fi

proctype Worker()
{
	byte n[NP];            /* records of each partition in the batch */
	bit  pend[NP * NR];    /* A's effects, committed with A */
	byte p, i, total, chosen, r;
	short a;

restart:
	p = 0;
	do
	:: p < NP * NR -> pend[p] = 0; p++
	:: else -> break
	od;
	do
	:: committed[0] >= NR && committed[1] >= NR -> break
	:: else ->
		/* the batch: any number of the next records of each partition */
		total = 0;
		p = 0;
		do
		:: p < NP ->
			n[p] = 0;
			do
			:: committed[p] + n[p] < NR -> n[p]++
			:: true -> break
			od;
			total = total + n[p];
			p++
		:: else -> break
		od;
		if
		:: total == 0 -> goto next
		:: else -> skip
		fi;

		/* ---- G: one S transaction */
		atomic {
			chosen = NP;
			p = 0;
			do
			:: p < NP ->
				if
				:: n[p] > 0 ->
					a = committed[p];
					if
					:: first[p] >= 0 -> /* an A that died */
						if
						:: last[p] > suspect[p] -> suspect[p] = last[p]
						:: else -> skip
						fi;
#ifdef BUG_PER_PARTITION
						/* a single-record range of the
						 * partition counts, whatever else
						 * the batch held */
						if
						:: first[p] == last[p] && first[p] == a ->
							if
							:: cnt_off[p] != a -> cnt_off[p] = a; crashes[p] = 0
							:: else -> skip
							fi;
							crashes[p]++
						:: else -> skip
						fi;
#else
						if
						:: lone[p] ->
							if
							:: cnt_off[p] != first[p] ->
								cnt_off[p] = first[p];
								crashes[p] = 0
							:: else -> skip
							fi;
							crashes[p]++
						:: else -> skip
						fi;
#endif
						first[p] = -1; last[p] = -1; lone[p] = 0
					:: else -> skip
					fi;
					if
					:: cnt_off[p] >= 0 && cnt_off[p] < a ->
						cnt_off[p] = -1; crashes[p] = 0
					:: else -> skip
					fi;
					if
					:: suspect[p] >= 0 && suspect[p] < a -> suspect[p] = -1
					:: else -> skip
					fi;
					if
					:: suspect[p] >= 0 && chosen == NP -> chosen = p
					:: else -> skip
					fi
				:: else -> skip
				fi;
				p++
			:: else -> break
			od;
			/* what A covers */
			p = 0;
			do
			:: p < NP ->
				if
#ifdef BUG_PER_PARTITION
				/* every partition: a suspect one its first
				 * record, the others all they have */
				:: n[p] > 0 ->
					if
					:: suspect[p] >= 0 -> n[p] = 1
					:: else -> skip
					fi;
					first[p] = committed[p];
					last[p] = committed[p] + n[p] - 1
#else
				:: n[p] > 0 && (chosen == NP || chosen == p) ->
					if
					:: chosen == p -> n[p] = 1
					:: else -> skip
					fi;
					first[p] = committed[p];
					last[p] = committed[p] + n[p] - 1;
					lone[p] = (chosen != NP || total == 1)
				:: n[p] > 0 -> n[p] = 0 /* skipped this batch */
#endif
				:: else -> skip
				fi;
				p++
			:: else -> break
			od
		}
		KILL; /* G.marked */

		/* ---- A: one S transaction; a death discards it */
		p = 0;
		do
		:: p < NP ->
			i = 0;
			do
			:: i < n[p] ->
				r = R(p, committed[p] + i);
				if
				:: crashes[p] >= LIMIT && cnt_off[p] == committed[p] + i ->
					/* dead-lettered without its handler */
					assert(poison[r]); /* never an innocent */
					pend[r] = 1
				:: else ->
					runs[r]++;
					assert(runs[r] <= LIMIT + 1);
					if
					:: poison[r] -> goto restart /* it kills */
					:: else -> pend[r] = 1
					fi
				fi;
				KILL;
				i++
			:: else -> break
			od;
			p++
		:: else -> break
		od;

		/* ---- A's commit with guard_clear, then F */
		atomic {
			p = 0;
			do
			:: p < NP ->
				if
				:: n[p] > 0 ->
					i = 0;
					do
					:: i < n[p] ->
						r = R(p, committed[p] + i);
						if
						:: cnt_off[p] == committed[p] + i &&
						   crashes[p] >= LIMIT -> dead[r] = 1
						:: else -> handled[r] = 1
						fi;
						pend[r] = 0;
						if
						:: cnt_off[p] == committed[p] + i ->
							cnt_off[p] = -1; crashes[p] = 0
						:: else -> skip
						fi;
						i++
					:: else -> break
					od;
					first[p] = -1; last[p] = -1; lone[p] = 0;
					committed[p] = committed[p] + n[p];
					if
					:: suspect[p] < committed[p] -> suspect[p] = -1
					:: else -> skip
					fi
				:: else -> skip
				fi;
				p++
			:: else -> break
			od
		}
next:
		skip
	od;
	over = 1
}

init
{
	byte r;

	atomic {
		r = 0;
		do
		:: r < NP * NR ->
			poison[r] = (POISON >> r) & 1;
			r++
		:: else -> break
		od;
		r = 0;
		do
		:: r < NP ->
			first[r] = -1; last[r] = -1; suspect[r] = -1;
			cnt_off[r] = -1;
			r++
		:: else -> break
		od;
		run Worker()
	}
	over;
	atomic {
		r = 0;
		do
		:: r < NP * NR ->
			assert(poison[r] -> dead[r] && !handled[r]
					 : handled[r] && !dead[r]);
			r++
		:: else -> break
		od
	}
}
