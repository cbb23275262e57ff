#!/usr/bin/env bash
# The whole check, as CI runs it: dependencies, a real Apache Kafka broker
# (scripts/kafka.sh), a throwaway PostgreSQL server (scripts/pg.sh) and a
# Jaeger for the otel tier (scripts/jaeger.sh, built in the background), a
# -Werror build and its tests, an ASan+UBSan build and its tests -- each
# suite with its `kafka` tier against that broker and its `pg` tier
# against that server --, a bounded run of the fuzz targets, clang-format, and a scan for banned
# string functions.  Every step runs (a failed build skips only its own
# tests); the last line sums up, and the exit status is 0 only if all
# passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

passed=()
failed=()
step() {
	local name=$1
	shift
	echo "=== test.sh: $name"
	if "$@"; then
		passed+=("$name")
		return 0
	fi
	failed+=("$name")
	echo "=== test.sh: $name FAILED" >&2
	return 1
}
skip() {
	failed+=("$1 (skipped)")
	echo "=== test.sh: $1 skipped: ${2:-its build failed}" >&2
}

if ! bash scripts/install-deps.sh; then
	echo "test.sh: FAIL: the dependencies could not be installed" >&2
	exit 1
fi

# One broker for both suites' kafka tier, stopped however this ends.  If
# it does not start, the tier's tests skip and the step fails the run.
kafka_dir=$(mktemp -d /tmp/tokenbox-kafka.XXXXXX)
stop_kafka() {
	bash scripts/kafka.sh stop --dir "$kafka_dir" >/dev/null 2>&1
	if ((${#failed[@]} == 0)); then
		rm -rf "$kafka_dir"
	else
		echo "test.sh: the broker's logs stay in $kafka_dir" >&2
	fi
}
trap stop_kafka EXIT
start_kafka() {
	local b
	b=$(bash scripts/kafka.sh start --dir "$kafka_dir") || return 1
	export TBX_KAFKA_BOOTSTRAP=$b
	echo "test.sh: Apache Kafka at $b (logs in $kafka_dir)"
}
unset TBX_KAFKA_BOOTSTRAP
step kafka-broker start_kafka

# One PostgreSQL server for both suites' pg tier: a fresh cluster (initdb)
# in a temporary directory, on a private Unix socket, stopped however this
# ends.  Port TBX_PG_PORT, else scripts/pg.sh's default (it only names the
# socket).  If it does not start, the tier's tests skip and the step fails
# the run.  The directory is made by hand, not mktemp -d: the server runs
# as the user postgres when this runs as root, and must enter it.
pg_dir=/tmp/tokenbox-pg.$$
stop_pg() {
	bash scripts/pg.sh stop --dir "$pg_dir" >/dev/null 2>&1
	if ((${#failed[@]} == 0)); then
		rm -rf "$pg_dir"
	else
		echo "test.sh: the PostgreSQL server's log stays in $pg_dir" >&2
	fi
}
# Jaeger for both suites' otel tier (scripts/jaeger.sh): built once into
# the cache with the machine's Go -- minutes on a fresh machine, so the
# build runs in the background while the suites below run, and the tier
# runs last, once Jaeger is up.
jaeger_dir=$(mktemp -d /tmp/tokenbox-jaeger.XXXXXX)
jaeger_build_pid=
stop_jaeger() {
	if [[ -n $jaeger_build_pid ]]; then
		kill "$jaeger_build_pid" 2>/dev/null
		wait "$jaeger_build_pid" 2>/dev/null
	fi
	bash scripts/jaeger.sh stop --dir "$jaeger_dir" >/dev/null 2>&1
	if ((${#failed[@]} == 0)); then
		rm -rf "$jaeger_dir"
	else
		echo "test.sh: Jaeger's logs stay in $jaeger_dir" >&2
	fi
}
stop_servers() {
	stop_jaeger
	stop_pg
	stop_kafka
}
trap stop_servers EXIT
start_pg() {
	local url
	rm -rf "$pg_dir"
	url=$(bash scripts/pg.sh start --dir "$pg_dir") || return 1
	export TBX_PG_URL=$url
	echo "test.sh: PostgreSQL at $url (log in $pg_dir)"
}
unset TBX_PG_URL
step pg-server start_pg

unset TBX_JAEGER_OTLP TBX_JAEGER_QUERY
bash scripts/jaeger.sh build >"$jaeger_dir/build.log" 2>&1 &
jaeger_build_pid=$!

# Four tests at a time: most of a test's time is spent waiting (consumer
# groups joining, brokers and servers answering).  Five at a time saved
# about 1.5 minutes of the first suite on 2 cores, and one test
# (test_worker_metrics, 12 s alone) ran past its 60 s limit there, beside
# the spin search and the chaos test.
jobs=4
if step build bash scripts/build.sh --dir build; then
	step tests ctest --test-dir build --output-on-failure -j$jobs -LE otel
else
	skip tests
fi

# Sanitizer reports go to files: Criterion runs each test in a worker
# process whose exit status does not fail the test, and tests start child
# processes of their own, so a leak report on stderr alone would pass
# unnoticed.  Any report file fails the step.
san_logs=$(mktemp -d /tmp/tokenbox-sanitizers.XXXXXX)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:log_path=$san_logs/asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:log_path=$san_logs/ubsan}
# The protocol model check (spin, gcc -O2) is the same search in both
# builds, none of it built with sanitizers: it runs in the first suite only.
# So do five of the pg tier's longest entries, to keep the whole run within
# CI's time: the multi-host test (shell-driven attacks on whole hosts,
# whose checks are the database's rows) and four protocol tests re-run on
# PostgreSQL (crash points, end to end, the sweeper's crashes, killed
# worker processes).  The sanitizer build runs those four on SQLite, the
# same protocol code, and the fault loop, every error path of the
# PostgreSQL code included, on both backends.  Likewise the orders example
# on the real broker (kafka_test_example_orders, 1.5 minutes under ASan):
# its code runs under ASan on the mock cluster (test_example_orders).
asan_suite() {
	local rc=0
	ctest --test-dir build-asan --output-on-failure -j$jobs -LE otel \
		-E '^(protocol_model_check|pg_multihost|pg_test_(crash_process|e2e_protocol|crash_sweep|multiprocess)|kafka_test_example_orders)$' || rc=1
	if compgen -G "$san_logs/*" >/dev/null; then
		echo "test.sh: sanitizer reports:" >&2
		cat "$san_logs"/* >&2
		rc=1
	fi
	return $rc
}
if step asan-build bash scripts/build.sh --sanitize --dir build-asan; then
	step asan-tests asan_suite
else
	skip asan-tests
fi

# The otel tier of both suites (label otel), against the Jaeger built in
# the background above.
start_jaeger() {
	local rc=0 ep
	wait "$jaeger_build_pid" || rc=$?
	jaeger_build_pid=
	if ((rc != 0)); then
		echo "test.sh: Jaeger could not be built:" >&2
		tail -n 30 "$jaeger_dir/build.log" >&2
		return 1
	fi
	ep=$(bash scripts/jaeger.sh start --dir "$jaeger_dir") || return 1
	export TBX_JAEGER_OTLP=$ep
	TBX_JAEGER_QUERY=$(cat "$jaeger_dir/query")
	export TBX_JAEGER_QUERY
	echo "test.sh: Jaeger at $ep (logs in $jaeger_dir)"
}
otel_tier() {
	local rc=0
	# The ASan suite's reports were printed with it: only new ones count.
	if compgen -G "$san_logs/*" >/dev/null; then
		mkdir -p "$san_logs.seen"
		mv "$san_logs"/* "$san_logs.seen"/
	fi
	if [[ -d build ]]; then
		ctest --test-dir build --output-on-failure -L otel || rc=1
	fi
	if [[ -d build-asan ]]; then
		ctest --test-dir build-asan --output-on-failure -L otel || rc=1
		if compgen -G "$san_logs/*" >/dev/null; then
			echo "test.sh: sanitizer reports:" >&2
			cat "$san_logs"/* >&2
			rc=1
		fi
	fi
	return $rc
}
if step jaeger start_jaeger; then
	step otel-tests otel_tier
else
	skip otel-tests "Jaeger did not start"
fi

# The fuzz targets (fuzz/) built with clang and libFuzzer, each run for a
# bounded time on its checked-in corpus; the corpus alone runs in both
# suites above as the fuzz_*_corpus tests.
step fuzz bash scripts/fuzz.sh --time 20

# clang-format and the banned string functions, over every folder that
# holds C sources (scripts/check-sources.sh).
step format bash scripts/check-sources.sh format
step banned-calls bash scripts/check-sources.sh banned

if ((${#failed[@]} == 0)); then
	echo "test.sh: PASS: ${passed[*]}"
	exit 0
fi
echo "test.sh: FAIL: ${failed[*]} (passed: ${passed[*]:-none})"
exit 1
