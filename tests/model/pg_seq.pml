/*
 * tokenbox on PostgreSQL: the two orderings that SQLite's one writer gave
 * for free and the PostgreSQL backends take with locks (docs/
 * architecture.md, "PostgreSQL: locking without a file lock", the rows
 * "B, mint", "subscribe" and A's untokened ingress; docs/model.md).
 *
 * Default: SUBSCRIBING AGAINST MINTING.  A group G subscribes to a topic
 * while a sender mints a token for a message to that topic.  A sequence
 * (nextval) is not transactional: its number is taken at once and never
 * given back, while the subscription and the token rows become visible
 * at their transactions' commits.  The receiver of the message later
 * decides by G's subscription (since) and the message's number (seq):
 *   no subscription, or seq < since   untokened: handled (by offset)
 *   a token row                        handled, then the token is deleted
 *   seq >= since and no token row      finished: dropped
 * The property: the receiver never drops the message unhandled, i.e. when
 * G subscribed with since < seq, the mint created G's token row.
 * The backends: subscribe takes pg_advisory_xact_lock (exclusive) on the
 * subscription key, then nextval, inserts, commits; mint takes
 * pg_advisory_xact_lock_shared on that key, then nextval, then reads the
 * subscriptions (a statement after the lock: it sees every subscription
 * committed before the lock was granted), inserts its token rows,
 * commits.  A crash at any point ends the transaction and its lock.
 *
 * -DINGRESS: UNTOKENED INGRESS.  Two workers (the partition's owner and a
 * zombie that lost the group) process the same untokened record at offset
 * 0 of one partition.  A's transaction: INSERT the ingress row ... ON
 * CONFLICT DO NOTHING, read its next offset with SELECT ... FOR UPDATE
 * (the row lock is held until the transaction ends; a waiter then reads
 * the committed row), and when the record's offset is not below it, run
 * the handler and set next = offset + 1; commit.  The property: the
 * handler's effect commits at most once, and once with no crash.
 *
 * Broken variants:
 *   BUG_NO_SUBLOCK        neither mint nor subscribe takes the lock
 *   BUG_SUBLOCK_AFTER_SEQ subscribe takes nextval before its lock
 *   BUG_READ_BEFORE_LOCK  mint reads the subscriptions before its lock
 *   BUG_NO_FOR_UPDATE     (INGRESS) the next offset is read with a plain
 *                         SELECT
 *   NOCRASH               no crash (the default budget is one per process)
 */

#ifndef INGRESS

byte seq = 0;		/* the sequence's last value */
byte since = 255;	/* G's committed subscription; 255: none */
bool token = false;	/* G's committed token row of the message */
byte mseq = 0;		/* the message's number; 0: not minted */
byte lock_excl = 0;	/* the subscription lock: holder pid + 1 */
byte lock_shared = 0;	/* shared holders */
bool minted = false;	/* the mint committed (the message was sent) */
bool sub_done = false, mint_done = false;

proctype Subscribe()
{
	byte mine = 255;
	bool held = false;
#ifdef BUG_SUBLOCK_AFTER_SEQ
	atomic { seq++; mine = seq }
#endif
#ifndef BUG_NO_SUBLOCK
	atomic { lock_excl == 0 && lock_shared == 0 -> lock_excl = 1; held = true }
#endif
#ifndef BUG_SUBLOCK_AFTER_SEQ
	atomic { seq++; mine = seq }
#endif
	/* INSERT, then COMMIT: visible and unlocked in one step. */
	atomic {
		since = mine;
		if
		:: held -> lock_excl = 0
		:: else -> skip
		fi;
		sub_done = true
	}
}

proctype Mint()
{
	byte seen = 255;	/* the subscription the mint read */
	byte mine = 0;
	bool held = false;
#ifdef BUG_READ_BEFORE_LOCK
	seen = since;
#endif
#ifndef BUG_NO_SUBLOCK
	atomic { lock_excl == 0 -> lock_shared++; held = true }
#endif
	atomic { seq++; mine = seq }
#ifndef BUG_READ_BEFORE_LOCK
	seen = since;
#endif
	/* A crash here (before the commit) mints nothing: the message is
	 * never sent, so nothing can be dropped. */
	if
	:: true ->
		atomic {
			token = (seen != 255 && seen < mine);
			mseq = mine;
			minted = true;
			if
			:: held -> lock_shared--
			:: else -> skip
			fi;
			mint_done = true
		}
#ifndef NOCRASH
	:: true ->
		atomic {
			if
			:: held -> lock_shared--
			:: else -> skip
			fi;
			mint_done = true
		}
#endif
	fi
}

init
{
	atomic { run Subscribe(); run Mint() }
	(sub_done && mint_done);
	/* The receiver's decision on the sent message, with the committed
	 * state (both transactions over). */
	if
	:: minted && since != 255 && mseq >= since && !token ->
		assert(false)	/* dropped, never handled */
	:: else -> skip
	fi
}

#else /* INGRESS */

byte next = 255;	/* the ingress row's committed next offset; 255: none */
byte lock_row = 0;	/* the row lock of the ingress row: holder pid + 1 */
byte effects = 0;	/* committed handler effects of the record at 0 */
byte crashed = 0;
byte done = 0;

proctype Worker()
{
	byte seen;
	bool handled = false, held = false;
	/* INSERT ... ON CONFLICT DO NOTHING: the row exists from here (a
	 * conflicting insert of an uncommitted row waits for it; both end
	 * with one row, next = 0 when new). */
	atomic {
		if
		:: next == 255 -> next = 0
		:: else -> skip
		fi
	}
#ifndef BUG_NO_FOR_UPDATE
	atomic { lock_row == 0 -> lock_row = _pid + 1; held = true; seen = next }
#else
	seen = next;
#endif
	if
	:: seen <= 0 -> handled = true	/* offset 0 not below next */
	:: else -> skip
	fi;
#ifndef BUG_NO_FOR_UPDATE
	/* Without FOR UPDATE, the UPDATE of next still takes the row lock,
	 * waits for the other's commit, and overwrites it. */
#endif
	if
	:: true ->	/* commit: the effect and next = 1 at once */
		atomic {
#ifdef BUG_NO_FOR_UPDATE
			lock_row == 0;
#endif
			if
			:: handled -> effects++; next = 1
			:: else -> skip
			fi;
			if
			:: held -> lock_row = 0
			:: else -> skip
			fi;
			done++
		}
#ifndef NOCRASH
	:: crashed == 0 ->	/* a crash rolls back and unlocks */
		atomic {
			crashed++;
			if
			:: held -> lock_row = 0
			:: else -> skip
			fi;
			done++
		}
#endif
	fi
}

init
{
	atomic { run Worker(); run Worker() }
	(done == 2);
	assert(effects <= 1);
	/* With no crash the record was handled once. */
	assert(crashed > 0 || effects == 1)
}

#endif
