#!/usr/bin/env bash
# Apache Kafka on loopback, for tests, the chaos harness, the benchmark and
# the demo against a real broker (beside the embedded mock cluster).
#
# The broker is fetched once with Maven into a cache, each start formats
# fresh KRaft storage (combined mode: every node is broker and controller),
# and the bootstrap servers go to standard output.  Run with --help.
set -euo pipefail

# Kafka 4.0.0 removed JoinGroup v0/v1, which librdkafka before 2.11 (Debian
# 12 ships 2.0.2) sends to detect features; 4.0.1 and 4.1.0 restored them
# (KAFKA-19444).  tests/test_kafka_broker.c proves this pin joins a group.
KAFKA_VERSION=${TBX_KAFKA_VERSION:-4.1.1}
LOG4J_VERSION=2.26.1
SLF4J_VERSION=2.0.17
HEAP_MB=${TBX_KAFKA_HEAP_MB:-512}

prog=scripts/kafka.sh
usage() {
	cat <<EOF
usage: $prog start [--brokers N] [--dir DIR] [--port-base P]
       $prog stop [--dir DIR]
       $prog kill --node I [--dir DIR]
       $prog restart --node I [--dir DIR]
       $prog status [--dir DIR]
       $prog fetch

Apache Kafka $KAFKA_VERSION on 127.0.0.1, in KRaft combined mode.

  start     fetches the broker into the cache (once), formats fresh storage
            under DIR, starts N nodes (each broker and controller) with a
            ${HEAP_MB} MB heap, waits until all of them answer metadata and
            prints the bootstrap servers ("127.0.0.1:P,...") on stdout;
            DIR/bootstrap holds them too.  A cluster already running in
            DIR is refused.  On failure it prints the tail of the log.
  stop      stops the nodes started in DIR (SIGTERM, SIGKILL after 30 s)
            and removes their storage; the logs stay.
  kill      SIGKILLs node I (1..N) of the cluster in DIR.
  restart   starts node I again on its storage (after kill) and waits
            until it answers metadata.
  status    lists the nodes in DIR and whether they run; exits 1 if any
            does not.
  fetch     only fetches the broker into the cache.

  --brokers N     nodes, 1 to 5 (default 1); replication factors are
                  min(N, 3), so a single node needs nothing else
  --dir DIR       state, storage and logs (default /tmp/tokenbox-kafka);
                  node I logs to DIR/node-I/broker.log
  --port-base P   node I listens on P+2(I-1) for clients and the next
                  port for the controller quorum (default 29000)
  --node I        the node for kill and restart

Environment: TBX_KAFKA_VERSION (default $KAFKA_VERSION),
TBX_KAFKA_PORT_BASE (the default of --port-base),
TBX_KAFKA_HEAP_MB (default 512), XDG_CACHE_HOME (the cache is
\${XDG_CACHE_HOME:-~/.cache}/tokenbox/kafka-VERSION).
Needs Java 17+ and Maven (Debian: default-jdk-headless, maven; installed
by scripts/install-deps.sh) and kcat.
EOF
}

die() {
	echo "$prog: $*" >&2
	exit 1
}

cmd=${1:-}
[[ -n $cmd ]] || {
	usage >&2
	exit 2
}
shift
brokers=1
dir=/tmp/tokenbox-kafka
# Below the ephemeral range (32768-60999): docs/operations.md.
port_base=${TBX_KAFKA_PORT_BASE:-29000}
node=
while (($#)); do
	case $1 in
	--brokers) brokers=${2:-} && shift 2 ;;
	--dir) dir=${2:-} && shift 2 ;;
	--port-base) port_base=${2:-} && shift 2 ;;
	--node) node=${2:-} && shift 2 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
done
[[ $brokers =~ ^[1-5]$ ]] || die "--brokers: want 1 to 5, got '$brokers'"
[[ $port_base =~ ^[0-9]+$ ]] && ((port_base >= 1024 && port_base <= 65000)) ||
	die "--port-base: want a port from 1024 to 65000, got '$port_base'"
[[ -n $dir ]] || die "--dir: empty"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/tokenbox/kafka-$KAFKA_VERSION

need_tools() {
	command -v java >/dev/null 2>&1 ||
		die "java not found: Kafka needs Java 17 or newer" \
			"(Debian: apt-get install default-jdk-headless, or bash scripts/install-deps.sh)"
	local v
	v=$(java -XshowSettings:properties -version 2>&1 |
		sed -n 's/^ *java.specification.version = //p')
	[[ ${v%%.*} =~ ^[0-9]+$ ]] && ((${v%%.*} >= 17)) ||
		die "java is version '${v:-unknown}': Kafka $KAFKA_VERSION needs 17 or newer"
	command -v kcat >/dev/null 2>&1 ||
		die "kcat not found (Debian: apt-get install kcat, or bash scripts/install-deps.sh)"
}

fetch() {
	[[ -f $cache/complete ]] && return 0
	command -v mvn >/dev/null 2>&1 ||
		die "mvn not found: the broker is fetched from Maven Central with Maven" \
			"(Debian: apt-get install maven, or bash scripts/install-deps.sh)"
	mkdir -p "$cache"
	rm -rf "$cache/libs"
	# The kafka_2.13 POM brings SLF4J 1.7 and no binding: without one the
	# broker logs nothing.  SLF4J 2 is declared directly so that it wins
	# over 1.7 and finds log4j2's provider.
	cat >"$cache/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tokenbox</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
	echo "$prog: fetching Apache Kafka $KAFKA_VERSION into $cache" >&2
	# Maven 3.8 colours its output even with -B: the escapes are taken out.
	if ! (cd "$cache" && mvn -q -B dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$cache/libs" 2>&1 |
		sed 's/\x1b\[[0-9;]*m//g' >&2); then
		die "Maven could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
			"(is Maven Central reachable?)"
	fi
	[[ -f $cache/libs/kafka_2.13-$KAFKA_VERSION.jar ]] ||
		die "Maven did not deliver kafka_2.13-$KAFKA_VERSION.jar"
	touch "$cache/complete"
}

client_port() { echo $((port_base + 2 * ($1 - 1))); }
controller_port() { echo $((port_base + 2 * ($1 - 1) + 1)); }

node_alive() {
	local pidf=$dir/node-$1/pid
	[[ -f $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null
}

# Writes node I's server.properties and log4j2 configuration.
node_config() {
	local i=$1 n=$2 voters=$3 rf=$(($2 < 3 ? $2 : 3)) nd=$dir/node-$1
	local min_isr=$((rf > 1 ? 2 : 1))
	mkdir -p "$nd"
	cat >"$nd/server.properties" <<EOF
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(client_port "$i"),CONTROLLER://127.0.0.1:$(controller_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(client_port "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$nd/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=1
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$min_isr
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
log.segment.bytes=67108864
leader.imbalance.check.interval.seconds=20
EOF
	cat >"$nd/log4j2.xml" <<EOF
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="$nd/broker.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="state.change.logger" level="warn"/>
    <Logger name="org.apache.kafka.controller" level="warn"/>
    <Logger name="kafka.log.LogCleaner" level="warn"/>
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
EOF
}

node_start() {
	local i=$1 nd=$dir/node-$1
	# setsid: the broker outlives this script and the shell that ran it,
	# and a terminal's ^C does not reach it.
	setsid java -Xms128m -Xmx"${HEAP_MB}m" -XX:+UseG1GC \
		-XX:MaxGCPauseMillis=20 -XX:-UsePerfData -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$nd/log4j2.xml" \
		-Dkafka.logs.dir="$nd" -cp "$cache/libs/*" kafka.Kafka \
		"$nd/server.properties" </dev/null >>"$nd/stdout.log" 2>&1 &
	echo $! >"$nd/pid"
}

log_tail() {
	local i=$1 nd=$dir/node-$1
	echo "--- node $i: last lines of $nd/broker.log" >&2
	tail -n 25 "$nd/broker.log" 2>/dev/null >&2 || true
	if [[ -s $nd/stdout.log ]]; then
		echo "--- node $i: $nd/stdout.log" >&2
		tail -n 15 "$nd/stdout.log" >&2
	fi
}

bootstrap_of() {
	local n=$1 list= i
	for ((i = 1; i <= n; i++)); do
		list+=${list:+,}127.0.0.1:$(client_port "$i")
	done
	echo "$list"
}

# Waits until the cluster's metadata lists @want brokers, every node in
# @nodes is alive, and every one of those answers on its own port.
wait_ready() {
	local want=$1 nodes=$2 deadline=$((SECONDS + ${TBX_KAFKA_START_TIMEOUT:-180})) i
	while ((SECONDS < deadline)); do
		for i in $nodes; do
			if ! node_alive "$i"; then
				echo "$prog: node $i exited while starting" >&2
				log_tail "$i"
				return 1
			fi
		done
		local ok=1
		for i in $nodes; do
			local md
			md=$(kcat -L -b "127.0.0.1:$(client_port "$i")" -m 3 2>/dev/null) || {
				ok=0
				break
			}
			grep -q "^ $want brokers:" <<<"$md" || {
				ok=0
				break
			}
		done
		((ok)) && return 0
		sleep 1
	done
	echo "$prog: the cluster did not answer metadata within" \
		"${TBX_KAFKA_START_TIMEOUT:-180} s" >&2
	for i in $nodes; do log_tail "$i"; done
	return 1
}

stop_all() {
	local i pids=()
	for nd in "$dir"/node-*; do
		[[ -f $nd/pid ]] || continue
		local pid
		pid=$(cat "$nd/pid")
		kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
	done
	local deadline=$((SECONDS + 30))
	for pid in "${pids[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	for nd in "$dir"/node-*; do
		[[ -d $nd ]] || continue
		rm -rf "$nd/data" "$nd/pid"
	done
	rm -f "$dir/bootstrap"
	return 0
}

case $cmd in
-h | --help | help)
	usage
	;;
fetch)
	fetch
	;;
start)
	need_tools
	fetch
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	for nd in "$dir"/node-*; do
		[[ -d $nd ]] || continue
		i=${nd##*/node-}
		node_alive "$i" &&
			die "node $i in $dir runs already (pid $(cat "$nd/pid")); $prog stop --dir $dir"
		rm -rf "$nd"
	done
	for ((i = 1; i <= brokers; i++)); do
		p=$(client_port "$i")
		if kcat -L -b "127.0.0.1:$p" -m 1 >/dev/null 2>&1; then
			die "port $p answers already: another cluster runs there (--port-base)"
		fi
	done
	echo "$brokers" >"$dir/brokers"
	echo "$port_base" >"$dir/port-base"
	voters=
	for ((i = 1; i <= brokers; i++)); do
		voters+=${voters:+,}$i@127.0.0.1:$(controller_port "$i")
	done
	cluster_id=$(java -cp "$cache/libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
	[[ $cluster_id =~ ^[A-Za-z0-9_-]{22}$ ]] ||
		die "kafka-storage random-uuid gave '$cluster_id'"
	for ((i = 1; i <= brokers; i++)); do
		node_config "$i" "$brokers" "$voters"
		if ! out=$(java -Dlog4j2.configurationFile="$dir/node-$i/log4j2.xml" \
			-cp "$cache/libs/*" kafka.tools.StorageTool format \
			--config "$dir/node-$i/server.properties" \
			--cluster-id "$cluster_id" 2>&1); then
			echo "$out" >&2
			die "formatting node $i's storage failed"
		fi
	done
	for ((i = 1; i <= brokers; i++)); do node_start "$i"; done
	if ! wait_ready "$brokers" "$(seq 1 "$brokers")"; then
		stop_all
		die "start failed; the logs are in $dir/node-*/"
	fi
	bootstrap_of "$brokers" >"$dir/bootstrap"
	cat "$dir/bootstrap"
	;;
stop)
	[[ -d $dir ]] || exit 0
	stop_all
	;;
kill | restart)
	[[ -f $dir/brokers ]] || die "no cluster in $dir"
	brokers=$(cat "$dir/brokers")
	port_base=$(cat "$dir/port-base")
	[[ $node =~ ^[1-9]$ ]] && ((node <= brokers)) ||
		die "--node: want 1 to $brokers, got '$node'"
	if [[ $cmd == kill ]]; then
		node_alive "$node" && kill -KILL "$(cat "$dir/node-$node/pid")"
		exit 0
	fi
	need_tools
	node_alive "$node" && die "node $node runs already"
	node_start "$node"
	wait_ready "$brokers" "$node" || die "node $node did not come back"
	;;
status)
	[[ -f $dir/brokers ]] || die "no cluster in $dir"
	rc=0
	for ((i = 1; i <= $(cat "$dir/brokers"); i++)); do
		if node_alive "$i"; then
			echo "node $i: running (pid $(cat "$dir/node-$i/pid"))"
		else
			echo "node $i: stopped"
			rc=1
		fi
	done
	exit $rc
	;;
*)
	die "unknown command '$cmd' (see --help)"
	;;
esac
