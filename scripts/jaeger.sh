#!/usr/bin/env bash
# Jaeger v2 on loopback: an OpenTelemetry Collector distribution that
# receives OTLP/HTTP, keeps the spans in memory and answers Jaeger's query
# API, for the otel test tier and for looking at a worker's traces.
#
# The binary is built once with the Go toolchain from the Go module proxy
# into a cache; each start writes a minimal configuration (every listener
# on 127.0.0.1) and waits until the query API answers.  Run with --help.
set -euo pipefail

JAEGER_VERSION=${TBX_JAEGER_VERSION:-1.76.0}

prog=scripts/jaeger.sh
usage() {
	cat <<EOF
usage: $prog start [--dir DIR] [--port-base P] [--ui DIR]
       $prog stop [--dir DIR]
       $prog status [--dir DIR]
       $prog build

Jaeger $JAEGER_VERSION (v2) on 127.0.0.1, spans kept in memory.

  start     builds Jaeger into the cache (once), writes DIR/config.yaml,
            starts Jaeger, waits until its query API answers and prints
            the OTLP/HTTP endpoint ("http://127.0.0.1:P") on stdout, the
            value for OTEL_EXPORTER_OTLP_ENDPOINT; DIR/endpoint holds it
            and DIR/query the query API's base URL.  A Jaeger already
            running in DIR is refused.  On failure it prints the tail of
            the log.
  stop      stops the Jaeger started in DIR (SIGTERM, SIGKILL after
            15 s); the spans it kept are gone, the log stays.
  status    says whether the Jaeger in DIR runs and where; exits 1 if not.
  build     only builds Jaeger into the cache.

  --dir DIR       state and log (default /tmp/tokenbox-jaeger); Jaeger
                  logs to DIR/jaeger.log
  --port-base P   OTLP/HTTP receiver on P, the query API and UI
                  (http://127.0.0.1:P+1/) on P+1, its gRPC query API on
                  P+2 (default 29800)
  --ui DIR        start: serve the Jaeger UI from DIR, a built jaeger-ui
                  (the directory with its index.html).  Jaeger built
                  from the Go module proxy has no UI of its own (its
                  release builds embed one from the jaeger-ui
                  repository): without --ui the query API answers and the
                  UI's pages are a placeholder.

Environment: TBX_JAEGER_VERSION (default $JAEGER_VERSION),
TBX_JAEGER_UI (the default of --ui),
TBX_JAEGER_PORT_BASE (the default of --port-base), TBX_GO (the go
command; default: go on PATH, else /usr/local/go/bin/go),
TBX_JAEGER_START_TIMEOUT (seconds, default 60), XDG_CACHE_HOME (the
binary is \${XDG_CACHE_HOME:-~/.cache}/tokenbox/jaeger-VERSION/jaeger).
Building needs Go 1.24 or newer and the Go module proxy; it takes
minutes on two cores.  Needs curl.
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
dir=/tmp/tokenbox-jaeger
port_base=${TBX_JAEGER_PORT_BASE:-29800}
ui=${TBX_JAEGER_UI:-}
while (($#)); do
	case $1 in
	--dir) dir=${2:-} && shift 2 ;;
	--port-base) port_base=${2:-} && shift 2 ;;
	--ui) ui=${2:-} && shift 2 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
done
[[ $port_base =~ ^[0-9]+$ ]] && ((port_base >= 1024 && port_base <= 65000)) ||
	die "--port-base: want a port from 1024 to 65000, got '$port_base'"
[[ -n $dir ]] || die "--dir: empty"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/tokenbox/jaeger-$JAEGER_VERSION
bin=$cache/jaeger
otlp_port=$port_base
query_port=$((port_base + 1))
query_grpc_port=$((port_base + 2))

find_go() {
	local go=${TBX_GO:-}
	if [[ -z $go ]]; then
		go=$(command -v go 2>/dev/null || true)
		[[ -n $go ]] || go=/usr/local/go/bin/go
	fi
	[[ -x $go ]] || die "the go command was not found (TBX_GO, PATH," \
		"/usr/local/go/bin/go): building Jaeger needs Go 1.24 or newer"
	echo "$go"
}

build() {
	[[ -x $bin ]] && return 0
	local go mod
	go=$(find_go)
	mkdir -p "$cache"
	echo "$prog: building Jaeger $JAEGER_VERSION into $cache (minutes)" >&2
	# `go install ...@v$JAEGER_VERSION` refuses the module: its go.mod has
	# a replace directive (github.com/Shopify/sarama).  The module is
	# downloaded instead and built as the main module, with its own go.mod
	# and go.sum, so the replace applies and every dependency is the
	# version Jaeger's release pins.
	mod=$("$go" mod download -json \
		"github.com/jaegertracing/jaeger@v$JAEGER_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
		die "go mod download github.com/jaegertracing/jaeger@v$JAEGER_VERSION" \
			"failed (is the Go module proxy reachable?)"
	[[ -n $mod && -f $mod/go.mod ]] ||
		die "go mod download gave no module directory for Jaeger $JAEGER_VERSION"
	if ! GOFLAGS=-mod=readonly "$go" -C "$mod" build \
		-o "$bin.tmp" ./cmd/jaeger; then
		rm -f "$bin.tmp"
		die "building Jaeger $JAEGER_VERSION failed"
	fi
	mv "$bin.tmp" "$bin"
}

alive() {
	[[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null
}

write_config() {
	local ui_conf=
	if [[ -n $ui ]]; then
		ui_conf="
    ui:
      assets_path: '$ui'"
	fi
	cat >"$dir/config.yaml" <<EOF
# Written by $prog: Jaeger on loopback, spans in memory.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$query_port$ui_conf
    grpc:
      endpoint: 127.0.0.1:$query_grpc_port
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000

receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp_port

processors:
  batch:
    timeout: 100ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

log_tail() {
	echo "--- last lines of $dir/jaeger.log" >&2
	tail -n 25 "$dir/jaeger.log" 2>/dev/null >&2 || true
}

answers() {
	curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$1$2" 2>/dev/null
}

stop_it() {
	local pid
	[[ -f $dir/pid ]] || return 0
	pid=$(cat "$dir/pid")
	if kill -TERM "$pid" 2>/dev/null; then
		local deadline=$((SECONDS + 15))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/pid" "$dir/endpoint" "$dir/query"
}

case $cmd in
-h | --help | help)
	usage
	;;
build)
	build
	;;
start)
	command -v curl >/dev/null 2>&1 ||
		die "curl not found (Debian: apt-get install curl)"
	build
	if [[ -n $ui ]]; then
		[[ -f $ui/index.html ]] ||
			die "--ui: $ui has no index.html (want a built jaeger-ui)"
		ui=$(cd "$ui" && pwd)
	fi
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	alive && die "Jaeger in $dir runs already (pid $(cat "$dir/pid")); $prog stop --dir $dir"
	for p in $otlp_port $query_port $query_grpc_port; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			die "port $p answers already: another server runs there (--port-base)"
		fi
	done
	write_config
	# setsid: Jaeger outlives this script and the shell that ran it, and
	# a terminal's ^C does not reach it.
	setsid "$bin" --config "$dir/config.yaml" </dev/null \
		>>"$dir/jaeger.log" 2>&1 &
	echo $! >"$dir/pid"
	deadline=$((SECONDS + ${TBX_JAEGER_START_TIMEOUT:-60}))
	until answers "$query_port" /api/services &&
		curl -sS -m 2 -o /dev/null "http://127.0.0.1:$otlp_port/" 2>/dev/null; do
		if ! alive; then
			log_tail
			rm -f "$dir/pid"
			die "Jaeger exited while starting; the log is $dir/jaeger.log"
		fi
		if ((SECONDS >= deadline)); then
			log_tail
			stop_it
			die "Jaeger did not answer within ${TBX_JAEGER_START_TIMEOUT:-60} s"
		fi
		sleep 0.3
	done
	echo "http://127.0.0.1:$otlp_port" >"$dir/endpoint"
	echo "http://127.0.0.1:$query_port" >"$dir/query"
	cat "$dir/endpoint"
	;;
stop)
	[[ -d $dir ]] || exit 0
	stop_it
	;;
status)
	if alive; then
		echo "jaeger: running (pid $(cat "$dir/pid")), OTLP/HTTP" \
			"$(cat "$dir/endpoint" 2>/dev/null), query $(cat "$dir/query" 2>/dev/null)"
	else
		echo "jaeger: not running in $dir"
		exit 1
	fi
	;;
*)
	die "unknown command '$cmd' (see --help)"
	;;
esac
