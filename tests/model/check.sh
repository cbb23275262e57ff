#!/usr/bin/env bash
# Model-check tests/model/tokenbox.pml, poison.pml, pg.pml, pg_seq.pml,
# batch.pml and restore.pml
# with spin: the protocol as built must pass (errors: 0); each deliberately
# broken variant must fail (errors > 0).
# See docs/model.md.
set -u

here=$(cd "$(dirname "$0")" && pwd)
for tool in spin gcc timeout; do
	command -v "$tool" >/dev/null || { echo "check.sh: $tool not found" >&2; exit 2; }
done

# The time limit per case is a safety net against a runaway search, not a
# criterion: whether a case passes depends only on the search being
# exhaustive, so a loaded machine may make it slower but not make it fail.
# The largest case stores ~27 M states (~30 s on an idle machine).
case_limit=${TBX_MODEL_CASE_TIMEOUT:-1500}
case $case_limit in
'' | *[!0-9]*) echo "check.sh: TBX_MODEL_CASE_TIMEOUT must be seconds, not '$case_limit'" >&2; exit 2 ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tbx-model.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# name | spin -D flags, comma-separated (or -) | expectation (pass/fail) |
# model file (default tokenbox.pml)
# The correct model runs with the default crash budget (2); the reordering
# D-before-C, which the protocol allows, is checked with one crash to stay
# within the time budget.  The joined (single-file) path is small: it is
# also checked with four crashes and with asynchronous downstream groups.
# The recovery pass runs beside one worker.  poison.pml checks the guard's
# blame rule (phase G), apart from the exactly-once state.  pg.pml checks
# the PostgreSQL locking: two workers with copies of one message; pg_seq.pml
# the orderings of subscribing against minting and of two workers on one
# untokened partition; batch.pml the tokens and the outbox row by the batch
# as built (docs/batched-tokens.md): set bits, per-message records beside
# them, untokened records and tbx_outbox rows, apart and joined, with one
# crash (two crashes store tens of millions of states: run by hand,
# docs/model.md); restore.pml the numbers of a token store restored from
# an older backup.
cases='correct - pass
nocrash -DNOCRASH pass
check_before_lock -DBUG_CHECK_BEFORE_LOCK fail
consume_before_commit -DBUG_CONSUME_BEFORE_COMMIT fail
delete_row_before_token -DBUG_DELETE_ROW_BEFORE_TOKEN fail
unconditional_record -DBUG_UNCONDITIONAL_RECORD fail
consume_before_dispatch -DBUG_CONSUME_BEFORE_DISPATCH,-DMAXCRASH=1 pass
joined -DJOINED pass
joined_nocrash -DJOINED,-DNOCRASH pass
joined_crash4 -DJOINED,-DMAXCRASH=4 pass
joined_async -DJOINED,-DASYNC_DOWNSTREAM pass
joined_mixed -DJOINED_MIXED pass
joined_tokens_apart -DBUG_JOINED_TOKENS_APART fail
joined_registered -DBUG_JOINED_REGISTERED,-DASYNC_DOWNSTREAM fail
joined_row_before_token -DJOINED,-DBUG_DELETE_ROW_BEFORE_TOKEN fail
defer_finish -DDEFER_FINISH pass
defer_finish_crash4 -DDEFER_FINISH,-DMAXCRASH=4 pass
defer_finish_async -DDEFER_FINISH,-DASYNC_DOWNSTREAM pass
defer_finish_giveup -DDEFER_FINISH,-DGIVEUP pass
defer_commits_early -DBUG_DEFER_COMMITS_EARLY fail
recovery -DRECOVERY pass
recovery_remint -DBUG_RECOVERY_REMINT fail
poison - pass poison.pml
poison_one -DPOISON=2 pass poison.pml
poison_per_partition -DBUG_PER_PARTITION fail poison.pml
giveup -DGIVEUP,-DMAXCRASH=1 pass
joined_giveup -DJOINED,-DGIVEUP pass
giveup_loses -DGIVEUP,-DBUG_GIVEUP_LOSES fail
pg - pass pg.pml
pg_nocrash -DNOCRASH pass pg.pml
pg_joined -DJOINED pass pg.pml
pg_joined_crash4 -DJOINED,-DMAXCRASH=4 pass pg.pml
pg_token_lock -DJOINED,-DTOKEN_LOCK pass pg.pml
pg_recovery -DRECOVERY,-DNOCRASH pass pg.pml
pg_no_lock -DBUG_NO_LOCK fail pg.pml
pg_joined_no_lock -DJOINED,-DBUG_NO_LOCK fail pg.pml
pg_snapshot_before_lock -DBUG_SNAPSHOT_BEFORE_LOCK fail pg.pml
pg_joined_snapshot_before_lock -DJOINED,-DBUG_SNAPSHOT_BEFORE_LOCK fail pg.pml
pg_token_before_row -DBUG_TOKEN_BEFORE_ROW fail pg.pml
pg_lock_in_t -DBUG_LOCK_IN_T fail pg.pml
pg_token_lock_no_unique -DJOINED,-DTOKEN_LOCK,-DBUG_NO_UNIQUE fail pg.pml
pg_token_lock_conflict_ignored -DJOINED,-DTOKEN_LOCK,-DBUG_CONFLICT_IGNORED fail pg.pml
pg_write_fails -DWFAIL pass pg.pml
pg_joined_write_fails -DJOINED,-DWFAIL pass pg.pml
pg_joined_write_failure_ignored -DJOINED,-DWFAIL,-DBUG_WRITE_FAILURE_IGNORED fail pg.pml
pg_seq_subscribe - pass pg_seq.pml
pg_seq_subscribe_nocrash -DNOCRASH pass pg_seq.pml
pg_seq_subscribe_no_lock -DBUG_NO_SUBLOCK fail pg_seq.pml
pg_seq_sublock_after_seq -DBUG_SUBLOCK_AFTER_SEQ fail pg_seq.pml
pg_seq_read_before_lock -DBUG_READ_BEFORE_LOCK fail pg_seq.pml
pg_seq_ingress -DINGRESS pass pg_seq.pml
pg_seq_ingress_nocrash -DINGRESS,-DNOCRASH pass pg_seq.pml
pg_seq_ingress_no_for_update -DINGRESS,-DBUG_NO_FOR_UPDATE fail pg_seq.pml
batch -DMAXCRASH=1 pass batch.pml
batch_nocrash -DNOCRASH pass batch.pml
batch_keep_memory -DKEEP_MEMORY,-DMAXCRASH=1 pass batch.pml
batch_permsg -DPERMSG,-DMAXCRASH=1 pass batch.pml
batch_untok -DUNTOK,-DMAXCRASH=1 pass batch.pml
batch_joined -DJOINED pass batch.pml
batch_joined_crash4 -DJOINED,-DMAXCRASH=4 pass batch.pml
batch_joined_permsg -DJOINED,-DPERMSG pass batch.pml
batch_joined_untok -DJOINED,-DUNTOK pass batch.pml
batch_clear_outside_d -DBUG_CLEAR_OUTSIDE_D fail batch.pml
batch_stale_bitmap -DBUG_STALE_BITMAP,-DPENDING_BIT fail batch.pml
batch_shared_row -DBUG_SHARED_ROW fail batch.pml
batch_trust_memory -DBUG_TRUST_MEMORY fail batch.pml
batch_token_before_lock -DBUG_TOKEN_BEFORE_LOCK fail batch.pml
batch_gen_unlocked -DBUG_GEN_UNLOCKED fail batch.pml
batch_no_ensure -DBUG_NO_ENSURE,-DNOCRASH,-DMAXREB=0 fail batch.pml
batch_no_cover_msg -DPERMSG,-DBUG_NO_COVER_MSG fail batch.pml
batch_no_msg_lock -DPERMSG,-DBUG_NO_MSG_LOCK,-DNOCRASH fail batch.pml
batch_untok_by_ingress -DUNTOK,-DBUG_UNTOKENED_BY_INGRESS fail batch.pml
batch_no_record_rows -DUNTOK,-DBUG_NO_RECORD_ROWS fail batch.pml
restore - pass restore.pml
restore_no_ranges -DBUG_NO_RANGES fail restore.pml
restore_fixed_jump -DBUG_FIXED_JUMP fail restore.pml
restore_unlocked_jump -DBUG_UNLOCKED_JUMP fail restore.pml
restore_clock_back -DBUG_CLOCK_BACK fail restore.pml'

# The cases whose search stores about a million states or more (docs/model.md's
# tables): their pan is compiled with -O2, the others' with -O0.
big='^(correct|consume_before_dispatch|joined_mixed|recovery|giveup|pg|pg_recovery|pg_write_fails|batch|batch_keep_memory|batch_permsg|batch_untok|batch_joined_untok)$'

# TBX_MODEL_ONLY: an extended regular expression; only the cases whose
# name matches it run (e.g. TBX_MODEL_ONLY='^pg' for pg.pml's).
only=${TBX_MODEL_ONLY:-}

ok=0 bad=0 start=$(date +%s)
while read -r name flag expect file; do
	file=${file:-tokenbox.pml}
	if [ -n "$only" ] && ! grep -Eq -- "$only" <<<"$name"; then continue; fi
	dir="$tmp/$name"
	mkdir -p "$dir"
	cp "$here/$file" "$dir/"
	if [ "$flag" = - ]; then flag=; else flag=${flag//,/ }; fi
	t0=$(date +%s)
	# Only the searches of a million states or more (the list big above)
	# gain from an optimised pan.  Every other case searches a few
	# hundred thousand states at most, or stops at its first violation:
	# its pan is compiled without optimisation, which takes a fifth of
	# the CPU time of -O2 (~0.5 s against ~2.3 s for tokenbox.pml), more
	# than the slower search costs.  The search, and so what a case
	# checks, is the same at any -O level.
	# The big ones also get a hash table of 2^26 slots (-w26, 512 MB)
	# instead of pan's 2^24: for the 26.6 M states of "correct", a fifth
	# of the hash conflicts and 13% less CPU time, the same states stored.
	if grep -Eq -- "$big" <<<"$name"; then
		opt=-O2 hash=-w26
	else
		opt=-O0 hash=
	fi
	if ! (cd "$dir" && spin -a $flag "$file" >spin.log 2>&1 &&
	      gcc -w $opt -DSAFETY -DCOLLAPSE -o pan pan.c >gcc.log 2>&1); then
		echo "FAIL  $name: spin/gcc failed"; cat "$dir"/*.log; bad=$((bad + 1)); continue
	fi
	(cd "$dir" && timeout "$case_limit" ./pan -m100000 $hash >pan.log 2>&1)
	rc=$?
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.log" | head -n1)
	what=$(grep -m1 -E '^pan:1:|max search depth too small|out of memory' "$dir/pan.log")
	states=$(sed -n 's/^ *\([0-9]*\) states, stored.*/\1/p' "$dir/pan.log" | head -n1)
	secs=$(($(date +%s) - t0))
	if [ -z "$errors" ] || [ $rc -eq 124 ]; then
		got=incomplete
	elif [ "$errors" -eq 0 ]; then
		got=pass
	else
		got=fail
	fi
	# a "pass" must be an exhaustive search: no depth truncation
	if [ "$got" = pass ] && grep -q 'max search depth too small' "$dir/pan.log"; then
		got=incomplete
	fi
	if [ "$got" = "$expect" ]; then
		res=ok; ok=$((ok + 1))
	else
		res=FAIL; bad=$((bad + 1))
	fi
	printf '%-4s  %-24s expect %-4s got %-10s errors=%s states=%s %ss %s\n' \
		"$res" "$name" "$expect" "$got" "${errors:-?}" "${states:-?}" "$secs" "$what"
	if [ "$res" = FAIL ]; then tail -n 30 "$dir/pan.log"; fi
done <<<"$cases"

echo "summary: $ok ok, $bad failed, $(($(date +%s) - start))s"
[ "$bad" -eq 0 ]
