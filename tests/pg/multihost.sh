#!/usr/bin/env bash
# Several hosts, made of network namespaces: three hosts h1..h3 each run
# a `tokenbox worker` of order-service and one of payment-service (the
# orders example plugin), all members of the two consumer groups; a
# fourth, infra, runs PostgreSQL and `tokenbox mock-cluster`.  Each host
# has two links to infra, one that carries Kafka and one that carries
# PostgreSQL, so that either can be cut alone.  While orders flow, five
# attacks, each followed by recovery and a check from the database:
#
#   a  kill -9 every process of a host, then start it again
#   b  pause a host holding a batch and cut its link to the brokers while
#      its link to PostgreSQL stays up: the group moves its partitions,
#      the paused member goes on as a zombie and finishes its batch in
#      the database; then restore the link
#   c  cut a host's link to PostgreSQL, then restore it
#   d  restart PostgreSQL (fast shutdown: every session ends)
#   e  pg_terminate_backend() of every session of the workers
#
# The check: every order has its row in `orders` and in `payments`
# exactly once (count = distinct = published), no outbox row, no dead
# letter; at the end no token and no registration either.  Exits non-zero
# with the evidence when it fails, 77 (skipped) only where network
# namespaces cannot be made (not root, or the kernel refuses them).
#
# usage: multihost.sh SOURCE_DIR BUILD_DIR
# environment:
#   TBX_TIME_FACTOR            stretches every wait (default 1)
#   TBX_MULTIHOST_MESSAGES     orders published (default 3000)
#   TBX_MULTIHOST_BACKEND      pg (default) or sqlite: the stores in
#                              SQLite files on the shared file system
#                              (attacks c, d and e are then skipped)
#   TBX_MULTIHOST_PG_PORT      PostgreSQL's port in infra (default 29760)
#   TBX_MULTIHOST_BREAK        for checking the check: "rows" deletes a
#                              business row before the final check,
#                              "twice" doubles one; the check must fail
#   TBX_MULTIHOST_KEEP=1       keep the temporary directory (logs)
set -u

src=${1:?usage: multihost.sh SOURCE_DIR BUILD_DIR}
bin=${2:?usage: multihost.sh SOURCE_DIR BUILD_DIR}
tbx=$bin/tokenbox
plugin=$bin/examples/libtbx_orders.so
backend=${TBX_MULTIHOST_BACKEND:-pg}
msgs=${TBX_MULTIHOST_MESSAGES:-3000}
tf=${TBX_TIME_FACTOR:-1}
pg_port=${TBX_MULTIHOST_PG_PORT:-29760}
brk=${TBX_MULTIHOST_BREAK:-}
case $brk in '' | rows | twice) ;; *)
	echo "FAIL: TBX_MULTIHOST_BREAK: want rows or twice, got '$brk'"
	exit 2
	;;
esac

[[ $tf =~ ^[1-9][0-9]*$ ]] || tf=1
[[ $pg_port =~ ^[0-9]+$ ]] && ((pg_port >= 1024 && pg_port <= 65535)) || {
	echo "FAIL: TBX_MULTIHOST_PG_PORT: want a port from 1024 to 65535, got '$pg_port'"
	exit 2
}
[[ $msgs =~ ^[1-9][0-9]*$ ]] && ((msgs >= 50)) || {
	echo "FAIL: TBX_MULTIHOST_MESSAGES: want a number >= 50, got '$msgs'"
	exit 2
}
case $backend in pg | sqlite) ;; *)
	echo "FAIL: TBX_MULTIHOST_BACKEND: want pg or sqlite, got '$backend'"
	exit 2
	;;
esac
for f in "$tbx" "$plugin" "$src/scripts/pg.sh"; do
	[[ -e $f ]] || {
		echo "FAIL: $f not found (build the project first)"
		exit 1
	}
done

log() { echo "[$(date -u +%T)] $*"; }

skip() {
	echo "skipped: $*"
	exit 77
}

# --- Namespaces: made first, so that a refusal skips before anything else.
pfx=tbxmh$$
infra=${pfx}i
hosts=(${pfx}h1 ${pfx}h2 ${pfx}h3)
made_ns=()
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2) to make network namespaces"
((EUID == 0)) || skip "network namespaces need root (ip netns add); run as root"
if ! err=$(ip netns add "$infra" 2>&1); then
	skip "the kernel refuses network namespaces: ip netns add: $err"
fi
made_ns+=("$infra")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tbx-multihost.XXXXXX")
chmod 0755 "$tmp" # the server runs as "postgres" when root
pg_dir=$tmp/pg
failed=0

# Every process of every namespace, the server, the namespaces (their
# veth pairs go with them) and the directory, on any exit.
# The hosts' processes first (SIGTERM, SIGKILL after 10 s), then the
# server, then what is left in infra (the mock cluster).
kill_ns() {
	local ns pids i
	for ns in "$@"; do
		pids=$(ip netns pids "$ns" 2>/dev/null)
		[[ -n $pids ]] && kill -TERM $pids 2>/dev/null &&
			kill -CONT $pids 2>/dev/null # a paused host too
	done
	for ((i = 0; i < 100; i++)); do
		pids=
		for ns in "$@"; do
			pids+=$(ip netns pids "$ns" 2>/dev/null)
		done
		[[ -z $pids ]] && return 0
		sleep 0.1
	done
	for ns in "$@"; do
		pids=$(ip netns pids "$ns" 2>/dev/null)
		[[ -n $pids ]] && kill -KILL $pids 2>/dev/null
	done
}
cleanup() {
	local ns
	trap - EXIT INT TERM
	: >"$tmp/stop" 2>/dev/null
	kill_ns "${made_ns[@]:1}"
	bash "$src/scripts/pg.sh" stop --dir "$pg_dir" >/dev/null 2>&1
	kill_ns "$infra"
	wait 2>/dev/null
	for ns in "${made_ns[@]}"; do
		ip netns del "$ns" 2>/dev/null
	done
	if [[ ${TBX_MULTIHOST_KEEP:-} == 1 ]] || ((failed)); then
		echo "logs kept in $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	failed=1
	echo "FAIL: $*"
	local f
	for f in "$tmp"/logs/*.log; do
		[[ -s $f ]] || continue
		echo "--- last lines of $f"
		tail -n 8 "$f"
	done
	[[ -s $tmp/exits ]] && {
		echo "--- worker exits"
		cat "$tmp/exits"
	}
	exit 1
}

# A command in network namespace $1.
in_ns() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@"
}

for h in "${hosts[@]}"; do
	err=$(ip netns add "$h" 2>&1) || fail "ip netns add $h: $err"
	made_ns+=("$h")
done

# --- The network.  Each host i has two veth pairs to infra:
#   k: 10.201.i.2 <-> 10.201.i.1  carries Kafka
#   p: 10.202.i.2 <-> 10.202.i.1  carries PostgreSQL (10.203.0.1 on infra)
# The mock cluster listens on 127.0.0.1 only and names 127.0.0.1 in its
# metadata, so a host routes 127.0.0.1 over k to infra: its loopback
# stays down and route_localnet lets 127.0.0.1 cross the link (infra's
# own loopback answers).  Cutting a link: infra's end goes down, and
# packets over it are dropped without a word, as on a broken network.
pg_addr=10.203.0.1
net_setup() {
	local i h
	ip -n "$infra" link set lo up || return 1
	ip -n "$infra" addr add "$pg_addr/32" dev lo || return 1
	in_ns "$infra" sysctl -qw net.ipv4.conf.all.route_localnet=1 || return 1
	for i in 1 2 3; do
		h=${hosts[i - 1]}
		ip link add "k$i" netns "$infra" type veth peer name k0 netns "$h" || return 1
		ip link add "p$i" netns "$infra" type veth peer name p0 netns "$h" || return 1
		ip -n "$infra" addr add "10.201.$i.1/30" dev "k$i" || return 1
		ip -n "$infra" addr add "10.202.$i.1/30" dev "p$i" || return 1
		ip -n "$infra" link set "k$i" up || return 1
		ip -n "$infra" link set "p$i" up || return 1
		in_ns "$infra" sysctl -qw "net.ipv4.conf.k$i.route_localnet=1" || return 1
		ip -n "$h" addr add "10.201.$i.2/30" dev k0 || return 1
		ip -n "$h" addr add "10.202.$i.2/30" dev p0 || return 1
		ip -n "$h" link set k0 up || return 1
		ip -n "$h" link set p0 up || return 1
		in_ns "$h" sysctl -qw net.ipv4.conf.all.route_localnet=1 \
			net.ipv4.conf.k0.route_localnet=1 || return 1
		ip -n "$h" route add 127.0.0.1/32 via "10.201.$i.1" dev k0 || return 1
		ip -n "$h" route add "$pg_addr/32" via "10.202.$i.1" dev p0 || return 1
	done
}
net_setup || fail "setting up the links between the namespaces failed"

# Whether host $1 (1..3) reaches TCP port $3 of address $2 (a 3 s try).
reaches() {
	in_ns "${hosts[$1 - 1]}" timeout 3 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND until it
# succeeds; the time is multiplied by TBX_TIME_FACTOR.  Fails the test
# when it runs out.
wait_until() {
	local end=$((SECONDS + $1 * tf))
	shift
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.5
	done
}
wait_for() {
	local what=$1 secs=$2
	shift 2
	wait_until "$secs" "$@" || fail "$what: not within $((secs * tf)) s"
}

mkdir -p "$tmp/logs" "$tmp/metrics"

# --- PostgreSQL in infra, over TCP for the hosts (and its socket for the
# checks made from here).
pg_sock_url=
pg_admin=()
if [[ $backend == pg ]]; then
	bindir=$(bash "$src/scripts/pg.sh" bindir) ||
		fail "the PostgreSQL server is not installed (Debian: postgresql; bash scripts/install-deps.sh)"
	pg_sock_url=$(in_ns "$infra" bash "$src/scripts/pg.sh" start --dir "$pg_dir" \
		--port "$pg_port" --listen "$pg_addr" --trust 10.202.0.0/16) ||
		fail "scripts/pg.sh start in $infra failed"
	pg_admin=("$bindir/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$pg_dir/sock" -p "$pg_port" -U postgres -d tokenbox)
	# Timeouts an operator would set for hosts that can lose the
	# network: a connection attempt and unacknowledged data give up
	# after 10 s instead of TCP's minutes.
	store_url="postgresql://tokenbox@$pg_addr:$pg_port/tokenbox?connect_timeout=10&tcp_user_timeout=10000&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
	for i in 1 2 3; do
		wait_for "host h$i reaching PostgreSQL at $pg_addr:$pg_port" 30 reaches "$i" "$pg_addr" "$pg_port"
	done
fi

# --- The Kafka mock cluster in infra: three brokers.
ip netns exec "$infra" "$tbx" mock-cluster -b 3 -t orders:6 -t payments:6 -t orders.dlq:1 \
	-t payments.dlq:1 -f "$tmp/bootstrap" >/dev/null 2>"$tmp/logs/mock-cluster.log" &
disown $!
wait_for "the mock cluster's bootstrap line" 30 test -s "$tmp/bootstrap"
boot=$(cat "$tmp/bootstrap")
[[ $boot =~ ^127\.0\.0\.1:[0-9]+(,127\.0\.0\.1:[0-9]+)*$ ]] ||
	fail "unexpected bootstrap line '$boot'"
broker_port=${boot%%,*}
broker_port=${broker_port#*:}
for i in 1 2 3; do
	wait_for "host h$i reaching the broker 127.0.0.1:$broker_port" 30 \
		reaches "$i" 127.0.0.1 "$broker_port"
done
log "network up: infra ($pg_addr, brokers $boot), hosts h1 h2 h3 (backend $backend)"

# --- Stores and the database's view of them.
services=(order-service payment-service)
# q SERVICE|tokens SQL: one value from a service's store or the token
# store; empty when the table does not exist yet.
if [[ $backend == pg ]]; then
	store_keys() {
		printf '%s\n' "store.url=$store_url" "tokens.url=$store_url"
	}
	q() {
		local schema=$1
		[[ $schema == tokens ]] && schema=tokenbox_tokens
		"${pg_admin[@]}" -c "SET search_path TO \"$schema\", public" -c "$2" 2>/dev/null
	}
	tokens_arg=(-S "$store_url")
else
	store_keys() {
		printf '%s\n' "store.path=$tmp/$1.db" "tokens.path=$tmp/tokens.db"
	}
	q() {
		local f=$tmp/$1.db
		[[ $1 == tokens ]] && f=$tmp/tokens.db
		[[ -f $f ]] || return 0
		sqlite3 -batch -noheader -cmd ".timeout 30000" "$f" "$2" 2>/dev/null
	}
	tokens_arg=(-S "$tmp/tokens.db")
fi
# The token store, made from h1 as an operator would, once.
out=$(in_ns "${hosts[0]}" "$tbx" init --tokens "${tokens_arg[1]}" 2>&1) ||
	fail "tokenbox init --tokens ${tokens_arg[1]}: $out"
log "$out"

# A count; 0 when the table is not there yet.
n() {
	local v
	v=$(q "$1" "$2")
	[[ $v =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}
# A count for the checks: a query that fails (a table not found) fails
# the test rather than count 0.
count() {
	local v
	v=$(q "$1" "$2")
	[[ $v =~ ^[0-9]+$ ]] || {
		echo "$1: '$2' gave '$v'" >&2
		return 1
	}
	echo "$v"
}

session_ms=6000
for s in "${services[@]}"; do
	role=$s
	{
		echo "# $s: one worker per host (multihost.sh)"
		echo "kafka.bootstrap.servers=$boot"
		echo "group.id=$s"
		store_keys "$s"
		echo "plugin=$plugin"
		echo "plugin.args=role=$role"
		echo "kafka.consumer.session.timeout.ms=$session_ms"
		echo "kafka.consumer.heartbeat.interval.ms=500"
		# Attack b holds the table orders for a few seconds.
		echo "store.busy.timeout.ms=30000"
		echo "cleanup.interval.ms=1000"
		echo "recovery.interval.ms=2000"
		echo "stats.interval.ms=0"
		echo "metrics.interval.ms=250"
		echo "log.level=notice"
	} >"$tmp/$s.conf"
done

# --- Workers.  Each host runs its workers under a small supervisor of
# its own (as systemd would, Restart=always), in its namespace: killing
# every process of the host kills the supervisor too.  Every exit of a
# worker is written to $tmp/exits.
start_host() {
	local i=$1 s
	for s in "${services[@]}"; do
		ip netns exec "${hosts[i - 1]}" env STOP="$tmp/stop" TBX="$tbx" CONF="$tmp/$s.conf" \
			ID="$s@h$i" LOG="$tmp/logs/$s@h$i.log" EXITS="$tmp/exits" \
			METRICS="$tmp/metrics/$s@h$i.prom" \
			bash -c 'while [ ! -e "$STOP" ]; do
				"$TBX" worker --config "$CONF" -X worker.id="$ID" \
					-X metrics.textfile="$METRICS" >>"$LOG" 2>&1
				rc=$?
				echo "$(date -u +%T) $ID exited with status $rc" >>"$EXITS"
				[ -e "$STOP" ] || sleep 1
			done' &
		# Not waited for: a killed host is gone when its namespace
		# holds no process (and bash does not report the kill).
		disown $!
	done
}

# metric NAME HOST...: the sum of counter tokenbox_NAME over the current
# workers of the hosts (1..3), from their metrics.textfile.
metric() {
	local name=$1 i s sum=0 v
	shift
	for i in "$@"; do
		for s in "${services[@]}"; do
			v=$(awk -v m="tokenbox_$name{" 'index($0, m) == 1 { print $2 }' \
				"$tmp/metrics/$s@h$i.prom" 2>/dev/null)
			[[ $v =~ ^[0-9]+$ ]] && sum=$((sum + v))
		done
	done
	echo "$sum"
}

host_pids() { ip netns pids "${hosts[$1 - 1]}" 2>/dev/null; }
host_empty() { [[ -z $(host_pids "$1") ]]; }

# kill -9 every process of host $1, and wait until none is left.
kill_host() {
	local i=$1 pids
	pids=$(host_pids "$i")
	[[ -n $pids ]] || fail "host h$i runs no process to kill"
	kill -KILL $pids 2>/dev/null
	wait_for "every process of h$i gone after kill -9" 30 host_empty "$i"
	log "killed $(wc -w <<<"$pids") processes of h$i with SIGKILL"
}

for i in 1 2 3; do
	start_host "$i"
done

# Senders mint tokens only for the groups subscribed when they send: the
# workers subscribe with their first poll.
subscribed() {
	(($(n tokens "SELECT COUNT(*) FROM tbx_subscriptions WHERE grp IN ('order-service', 'payment-service')") == 2))
}
wait_for "both groups subscribed in the token store" 120 subscribed
log "6 workers up and subscribed"

# --- Publishing.  Orders 1..N, keyed by one of 37 customers, sent from h1
# in chunks by `tokenbox send` with the order number as the caller's id
# (-i json:order): a chunk that failed (the token store or the brokers
# unreachable for a moment) is sent again, and the orders of it that did
# go out are not published twice.
published=0
mkdir -p "$tmp/chunks"
# publish FROM TO CHUNK: orders FROM..TO, in chunks of CHUNK.
publish() {
	local from=$1 to=$2 chunk=$3 a b k tries out
	for ((a = from; a <= to; a += chunk)); do
		b=$((a + chunk - 1 > to ? to : a + chunk - 1))
		for ((k = a; k <= b; k++)); do
			printf 'customer-%d\t{"order":"%d","amount":%d}\n' $((k % 37)) "$k" $((k % 1000 + 100))
		done >"$tmp/chunks/$a"
		for ((tries = 1; ; tries++)); do
			if out=$(in_ns "${hosts[0]}" "$tbx" send -b "$boot" -t orders -T OrderPlaced \
				"${tokens_arg[@]}" -K $'\t' -i json:order <"$tmp/chunks/$a" 2>&1); then
				break
			fi
			echo "[$(date -u +%T)] send of orders $a..$b failed (try $tries), again: $out" >>"$tmp/logs/send.log"
			((tries < 30 * tf)) || {
				echo "orders $a..$b: not published after $tries tries" >>"$tmp/logs/send.log"
				return 1
			}
			sleep 1
		done
	done
}

# Starts publishing the next SHARE orders in the background; sets
# pub_pid and published.
pub_pid=
publish_next() {
	local share=$1 chunk=$2 from=$((published + 1))
	published=$((published + share))
	publish "$from" "$published" "$chunk" &
	pub_pid=$!
}
publish_done() {
	[[ -n $pub_pid ]] || return 0
	wait "$pub_pid" || fail "publishing stopped: see $tmp/logs/send.log"
	pub_pid=
}
# ready_or_stuck COMMAND: COMMAND succeeds; fails the test at once when the
# publisher gave up instead.
ready_or_stuck() {
	"$@" && return 0
	if [[ -n $pub_pid ]] && ! kill -0 "$pub_pid" 2>/dev/null; then
		publish_done
	fi
	return 1
}

handled() { n order-service "SELECT COUNT(DISTINCT order_no) FROM orders"; }
paid() { n payment-service "SELECT COUNT(DISTINCT order_no) FROM payments"; }

# Traffic is flowing: some of the orders just published are handled.
flowing_since=0
flowing() { (($(handled) > flowing_since)); }
# h3 has taken records of the orders just published: it holds a batch.
# On PostgreSQL: a session of h3 (its address on the p link) waits for the
# lock of the table orders.  On SQLite: its metrics count records
# consumed, refreshed between batches.
h3_since=0
h3_busy() {
	if [[ $backend == pg ]]; then
		(($("${pg_admin[@]}" -c "SELECT COUNT(*) FROM pg_stat_activity WHERE client_addr = '10.202.3.2' AND wait_event_type = 'Lock'") > 0))
	else
		(($(metric consumed_total 3) > h3_since))
	fi
}

drained() {
	(($(handled) >= published && $(paid) >= published)) &&
		(($(n order-service "SELECT COUNT(*) FROM tbx_outbox") == 0)) &&
		(($(n payment-service "SELECT COUNT(*) FROM tbx_outbox") == 0))
}

# The check after each attack: every order published so far took effect
# exactly once at both hops, no outbox row, no dead letter.
check() {
	local what=$1 t s tbl rows distinct dl bad=
	for s in order-service:orders payment-service:payments; do
		t=${s#*:}
		s=${s%%:*}
		rows=$(count "$s" "SELECT COUNT(*) FROM $t") || fail "a query of the check failed (above)"
		distinct=$(count "$s" "SELECT COUNT(DISTINCT order_no) FROM $t") || fail "a query of the check failed (above)"
		dl=$(count "$s" "SELECT COUNT(*) FROM tbx_dead_letters") || fail "a query of the check failed (above)"
		if ((rows != published || distinct != published)); then
			bad+=" $t: $rows rows, $distinct distinct orders, $published published;"
			bad+=" twice: $(q "$s" "SELECT order_no || 'x' || COUNT(*) FROM $t GROUP BY order_no HAVING COUNT(*) > 1 ORDER BY 1 LIMIT 10" | tr '\n' ' ')"
			bad+=" missing: $(comm -13 <(q "$s" "SELECT DISTINCT order_no FROM $t" | sort) \
				<(seq 1 "$published" | sort) | head -n 10 | tr '\n' ' ')"
		fi
		((dl == 0)) || bad+=" $s: $dl dead letters: $(q "$s" "SELECT msg_id || ': ' || COALESCE(error, '') FROM tbx_dead_letters LIMIT 5" | tr '\n' ';')"
		tbl=$(count "$s" "SELECT COUNT(*) FROM tbx_outbox") || fail "a query of the check failed (above)"
		((tbl == 0)) || bad+=" $s: $tbl outbox rows left;"
	done
	[[ -z $bad ]] || fail "after $what:$bad"
	log "check after $what: $published orders, each once in orders and in payments; outbox empty, no dead letter"
}

# round NAME ATTACK RECOVER [READY [COUNT [CHUNK [PREPARE]]]]: run
# PREPARE (nothing), publish COUNT orders (a fifth) in chunks of CHUNK
# (50), wait until READY (flowing), attack, recover, wait until
# everything published is handled, check.
share=$((msgs / 5))
round() {
	local name=$1 attack=$2 recover=$3 ready=${4:-flowing} count=${5:-$share} chunk=${6:-50}
	local prepare=${7:-nothing}
	flowing_since=$(handled)
	h3_since=$(metric consumed_total 3)
	$prepare
	publish_next "$count" "$chunk"
	wait_for "$name: traffic flowing before the attack" 120 ready_or_stuck "$ready"
	log "$name: attacking with $((published - $(handled))) of $published orders not yet handled"
	$attack
	$recover
	publish_done
	wait_for "$name: every order handled at both hops after recovery" 300 drained
	check "$name"
	log "$name: so far the current workers dropped $(metric duplicates_dropped_total 1 2 3)" \
		"duplicates and resumed $(metric resumed_total 1 2 3) rows found in the outbox"
}

# a: every process of h2 killed, then h2 started again.
attack_kill() { kill_host 2; }
recover_kill() {
	start_host 2
	log "h2 started again"
}

# Waits N session timeouts: how long an attack lasts (not a check).
session_timeouts() {
	local until=$((SECONDS + $1 * session_ms / 1000 * tf))
	while ((SECONDS < until)); do sleep 1; done
}

# b: a zombie.  So that h3 surely holds a batch when it is cut, the table
# orders is locked (PostgreSQL) before b's orders are published: every
# order-service worker takes a batch and waits in its INSERT.  Then h3
# is paused (SIGSTOP: a long garbage-collection or swap pause), its link
# to the brokers cut (PostgreSQL stays reachable) and the lock released:
# h1 and h2 finish their batches, the group drops h3's members after the
# session timeout and gives their partitions to h1 and h2, which fetch
# from the last committed offsets the records h3 holds.  Then h3 goes on:
# it finishes its batch in the database as a member the group no longer
# has, while the others handle copies of the same messages, and cannot
# dispatch or commit.  At last its link comes back.
locker_pid=
lock_orders() {
	[[ $backend == pg ]] || return 0
	local line
	coproc LOCKER { "${pg_admin[@]}" 2>&1; }
	locker_pid=$LOCKER_PID
	echo "SET search_path TO \"order-service\", public; BEGIN; LOCK TABLE orders IN EXCLUSIVE MODE; SELECT 'locked';" >&"${LOCKER[1]}"
	read -r -t $((30 * tf)) line <&"${LOCKER[0]}"
	[[ $line == locked ]] || fail "locking the table orders: $line"
	log "table orders locked: handlers wait in their INSERT"
}
unlock_orders() {
	[[ -n $locker_pid ]] || return 0
	echo "COMMIT;" >&"${LOCKER[1]}"
	eval "exec ${LOCKER[1]}>&-"
	wait "$locker_pid"
	locker_pid=
}
attack_broker() {
	local pids
	pids=$(host_pids 3)
	kill -STOP $pids || fail "pausing h3"
	ip -n "$infra" link set k3 down || fail "cutting k3"
	unlock_orders
	reaches 3 127.0.0.1 "$broker_port" && fail "h3 still reaches the broker after the cut"
	if [[ $backend == pg ]]; then
		reaches 3 "$pg_addr" "$pg_port" || fail "h3 lost PostgreSQL with the broker link"
	fi
	log "h3 paused, its link to the brokers cut (PostgreSQL reachable)"
	session_timeouts 3
	kill -CONT $pids
	log "h3 goes on: a zombie finishing its batch"
	session_timeouts 2
	zombie_sessions
}
recover_broker() {
	ip -n "$infra" link set k3 up || fail "restoring k3"
	wait_for "h3 reaching the broker again" 60 reaches 3 127.0.0.1 "$broker_port"
	log "h3's link to the brokers restored; in the outbox:" \
		"$(n order-service "SELECT COUNT(*) FROM tbx_outbox") order-service," \
		"$(n payment-service "SELECT COUNT(*) FROM tbx_outbox") payment-service rows"
}
# What h3's sessions did last, before the link comes back: the zombie's
# work in the database.
zombie_sessions() {
	[[ $backend == pg ]] || return 0
	log "h3's sessions while cut from the brokers:" \
		"$("${pg_admin[@]}" -c "SELECT state || ' after ' || left(regexp_replace(query, '\s+', ' ', 'g'), 50) FROM pg_stat_activity WHERE client_addr = '10.202.3.2'" | tr '\n' ';')"
}

# c: h2's link to PostgreSQL cut for two session timeouts, the brokers
# still reachable.
attack_pg_link() {
	ip -n "$infra" link set p2 down || fail "cutting p2"
	reaches 2 "$pg_addr" "$pg_port" && fail "h2 still reaches PostgreSQL after the cut"
	reaches 2 127.0.0.1 "$broker_port" || fail "h2 lost the brokers with the PostgreSQL link"
	log "h2's link to PostgreSQL cut (brokers reachable)"
	session_timeouts 2
}
recover_pg_link() {
	ip -n "$infra" link set p2 up || fail "restoring p2"
	wait_for "h2 reaching PostgreSQL again" 60 reaches 2 "$pg_addr" "$pg_port"
	log "h2's link to PostgreSQL restored"
}

# d: PostgreSQL restarted (fast shutdown ends every session; the data
# stay).
attack_pg_restart() {
	in_ns "$infra" bash "$src/scripts/pg.sh" restart --dir "$pg_dir" ||
		fail "scripts/pg.sh restart failed"
	log "PostgreSQL restarted"
}

# e: every session of the workers terminated by the server.
terminated=0
attack_terminate() {
	# CASE: the session itself is never terminated, whatever order the
	# planner picks.
	terminated=$("${pg_admin[@]}" -c "SELECT COALESCE(SUM(CASE WHEN application_name = 'tokenbox' AND pid <> pg_backend_pid() THEN CASE WHEN pg_terminate_backend(pid) THEN 1 ELSE 0 END ELSE 0 END), 0) FROM pg_stat_activity") ||
		fail "pg_terminate_backend failed"
	((terminated > 0)) || fail "pg_terminate_backend: no session with application_name 'tokenbox'"
	log "terminated $terminated sessions of the workers (pg_terminate_backend)"
}
nothing() { :; }

round "a (kill -9 of every process of h2)" attack_kill recover_kill
# All of b's orders in one go: h3 has a backlog fetched when it is cut.
round "b (h3 paused and cut from the brokers, not from PostgreSQL)" attack_broker \
	recover_broker h3_busy "$share" "$share" lock_orders
if [[ $backend == pg ]]; then
	round "c (h2 cut from PostgreSQL, not from the brokers)" attack_pg_link recover_pg_link
	round "d (PostgreSQL restarted)" attack_pg_restart nothing
	round "e (pg_terminate_backend of the workers' sessions)" attack_terminate nothing
else
	log "attacks c, d and e need PostgreSQL: skipped with TBX_MULTIHOST_BACKEND=sqlite"
fi
if ((published < msgs)); then
	round "no attack (the rest of the orders)" nothing nothing flowing $((msgs - published))
fi

# --- The end: the tokens are consumed and the registrations confirmed or
# swept once everything is dispatched.
leftovers() {
	(($(n tokens "SELECT COUNT(*) FROM tbx_tokens") == 0 &&
		$(n tokens "SELECT COUNT(*) FROM tbx_registrations") == 0))
}
count tokens "SELECT COUNT(*) FROM tbx_tokens" >/dev/null || fail "a query of the check failed (above)"
count tokens "SELECT COUNT(*) FROM tbx_registrations" >/dev/null || fail "a query of the check failed (above)"
if ! wait_until 120 leftovers; then
	fail "left over after the run: $(n tokens "SELECT COUNT(*) FROM tbx_tokens") tokens" \
		"($(q tokens "SELECT grp || ':' || COUNT(*) FROM tbx_tokens GROUP BY grp" | tr '\n' ' ')), " \
		"$(n tokens "SELECT COUNT(*) FROM tbx_registrations") registrations"
fi
case $brk in
rows)
	q order-service "DELETE FROM orders WHERE order_no = '7'" >/dev/null
	log "TBX_MULTIHOST_BREAK=rows: deleted order 7's row; the check must fail"
	;;
twice)
	q payment-service "INSERT INTO payments SELECT * FROM payments WHERE order_no = '7'" >/dev/null
	log "TBX_MULTIHOST_BREAK=twice: order 7's payment row doubled; the check must fail"
	;;
esac
check "the run"
[[ -s $tmp/exits ]] && {
	log "workers that exited (and were restarted by their host):"
	cat "$tmp/exits"
}
log "ok: $published orders through 3 hosts, each once at both hops; no token, registration or outbox row left"
