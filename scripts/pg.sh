#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: a fresh cluster (initdb) in a
# directory of its own, listening on a Unix socket in that directory (and,
# with --listen, on TCP too), started with pg_ctl and removed again by
# stop.  Run with --help.
set -euo pipefail

prog=scripts/pg.sh
usage() {
	cat <<EOF
usage: $prog start [--dir DIR] [--port P] [--durable]
                           [--listen ADDRS [--trust NET]]
       $prog restart [--dir DIR] [--mode fast|immediate]
       $prog stop [--dir DIR]
       $prog url [--dir DIR]
       $prog status [--dir DIR]
       $prog bindir

A throwaway PostgreSQL cluster for tests, nothing assumed about a server
already running.

  start     makes a fresh cluster in DIR/data (initdb), starts it with
            pg_ctl listening on the Unix socket DIR/sock/.s.PGSQL.P (TCP
            only with --listen), creates the login role "tokenbox" and
            the database "tokenbox" it owns, and prints a libpq URL for
            them on stdout; DIR/url holds it too.  A server already
            running in DIR is refused.  On failure it prints the tail of
            the server's log.
  restart   stops the server of DIR and starts it again on the same data
            (nothing is removed): sessions are cut, committed data stay.
            Run it in the network namespace the server was started in.
  stop      stops the server of DIR (fast shutdown, immediate after 60 s)
            and removes its data and socket directory; the log stays
            (DIR/server.log).
  url       prints the URL of the server in DIR.
  status    says whether the server in DIR runs; exits 1 if not.
  bindir    prints the directory of the server's programs (initdb, pg_ctl,
            postgres, psql); exits 1 if PostgreSQL is not installed.

  --dir DIR   the cluster's directory (default /tmp/tokenbox-pg); the
              socket's path DIR/sock/.s.PGSQL.P must fit in 107 bytes
  --port P    the port, which only names the socket unless --listen is
              given (default \$TBX_PG_PORT, else 29700)
  --durable   keep fsync on (off by default: a throwaway cluster must
              survive a killed process, not a power cut)
  --listen ADDRS
              also listen on TCP at ADDRS, IPv4 addresses separated by
              commas (listen_addresses), on port P; the URL printed
              stays the socket's, over TCP it is
              postgresql://tokenbox@ADDR:P/tokenbox
  --trust NET TCP connections from NET are trusted, without a password
              (pg_hba.conf: a CIDR such as 10.0.0.0/8, or samenet, the
              default: the subnets the server's host is directly
              connected to); others are refused.  Only with --listen,
              and only for a network of test hosts
  --mode M    restart: fast (default; sessions are ended, a checkpoint is
              written) or immediate (like a crash: recovery at start)

Without --listen the server has no TCP socket at all, so clusters in
different directories never collide, whatever their ports.

initdb and the server refuse to run as root: as root they run as the
unprivileged user "postgres" of Debian's package (through runuser), and DIR
is given to that user; otherwise they run as the calling user.  Local
connections are trusted: the socket's directory is open to the server's
user only (root passes anyway).  The programs are found with pg_config
--bindir, else in the newest /usr/lib/postgresql/*/bin (Debian: postgresql,
libpq-dev; installed by scripts/install-deps.sh), not through PATH.
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
dir=/tmp/tokenbox-pg
port=${TBX_PG_PORT:-29700}
durable=0
listen=
trust=
mode=fast
while (($#)); do
	case $1 in
	--dir) dir=${2:-} && shift 2 ;;
	--port) port=${2:-} && shift 2 ;;
	--durable) durable=1 && shift ;;
	--listen) listen=${2:-} && shift 2 ;;
	--trust) trust=${2:-} && shift 2 ;;
	--mode) mode=${2:-} && shift 2 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
done
[[ $port =~ ^[0-9]+$ ]] && ((port >= 1024 && port <= 65535)) ||
	die "--port: want a port from 1024 to 65535, got '$port'"
[[ -n $dir ]] || die "--dir: empty"
if [[ -n $listen ]]; then
	[[ $listen =~ ^[0-9.]+(,[0-9.]+)*$ ]] ||
		die "--listen: want IPv4 addresses separated by commas, got '$listen'"
	[[ -n $trust ]] || trust=samenet
	[[ $trust == samenet || $trust =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] ||
		die "--trust: want samenet or a CIDR such as 10.0.0.0/8, got '$trust'"
elif [[ -n $trust ]]; then
	die "--trust: only with --listen"
fi
[[ $mode == fast || $mode == immediate ]] ||
	die "--mode: want fast or immediate, got '$mode'"

# The directory of initdb, pg_ctl and postgres: pg_config's, else the
# newest version installed under /usr/lib/postgresql.
find_bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [[ -n $d && -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			echo "$d"
			return 0
		fi
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

need_bindir() {
	bindir=$(find_bindir) ||
		die "the PostgreSQL server is not installed (no initdb, pg_ctl and postgres" \
			"in pg_config --bindir or /usr/lib/postgresql/*/bin; Debian:" \
			"apt-get install postgresql, or bash scripts/install-deps.sh)"
	[[ -x $bindir/psql ]] || die "$bindir/psql not found"
}

# The user the server runs as, and how to run a program as that user.
if (($(id -u) == 0)); then
	srv_user=postgres
	id -u "$srv_user" >/dev/null 2>&1 ||
		die "running as root, but there is no user '$srv_user' to run the server as" \
			"(Debian's postgresql package creates it; or run as a non-root user)"
	command -v runuser >/dev/null 2>&1 || die "running as root, but runuser is not found"
	as_srv() { (cd / && runuser -u "$srv_user" -- "$@"); }
else
	srv_user=$(id -un)
	as_srv() { "$@"; }
fi

running() {
	[[ -f $dir/data/postmaster.pid ]] &&
		as_srv "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

log_tail() {
	echo "--- last lines of $dir/server.log" >&2
	tail -n 25 "$dir/server.log" >&2 2>/dev/null || true
}

stop_server() {
	[[ -d $dir/data ]] || return 0
	if running; then
		as_srv "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
			as_srv "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
			echo "$prog: the server in $dir did not stop (see $dir/server.log)" >&2
	fi
	rm -rf "$dir/data" "$dir/sock" "$dir/url"
}

case $cmd in
-h | --help | help)
	usage
	;;
bindir)
	find_bindir || exit 1
	;;
start)
	need_bindir
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[[ $dir =~ ^[A-Za-z0-9._/-]+$ ]] ||
		die "--dir: '$dir' has characters other than letters, digits and ._-/" \
			"(it goes into a URL and a socket path)"
	sock=$dir/sock
	((${#sock} + ${#port} + 10 <= 107)) ||
		die "--dir: the socket path $sock/.s.PGSQL.$port is longer than 107 bytes"
	if running; then
		die "a server runs in $dir already; $prog stop --dir $dir"
	fi
	rm -rf "$dir/data" "$sock" "$dir/url"
	mkdir -p "$sock"
	chmod 0700 "$dir" "$sock"
	if [[ $srv_user != $(id -un) ]]; then
		chown "$srv_user:" "$dir" "$sock"
		: >"$dir/server.log"
		chown "$srv_user:" "$dir/server.log"
		as_srv test -w "$dir" ||
			die "user $srv_user cannot reach $dir: a parent directory is closed to it" \
				"(choose a --dir under a directory it may enter, e.g. /tmp)"
	fi
	if ! out=$(as_srv "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust \
		-E UTF8 --locale=C --no-sync 2>&1); then
		echo "$out" >&2
		die "initdb failed"
	fi
	fsync=off
	((durable)) && fsync=on
	listen_conf="listen_addresses = ''"
	if [[ -n $listen ]]; then
		listen_conf="listen_addresses = '$listen'"
		as_srv sh -c "cat >>'$dir/data/pg_hba.conf'" <<EOF

# scripts/pg.sh --listen: test hosts on $trust, without a password
host all all $trust trust
EOF
	fi
	as_srv sh -c "cat >>'$dir/data/postgresql.conf'" <<EOF

# scripts/pg.sh: a private server on a Unix socket (and --listen)
$listen_conf
port = $port
unix_socket_directories = '$sock'
unix_socket_permissions = 0700
fsync = $fsync
max_connections = 100
EOF
	if ! as_srv "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
		-t "${TBX_PG_START_TIMEOUT:-120}" start >/dev/null 2>&1; then
		log_tail
		stop_server
		die "the server did not start; see $dir/server.log"
	fi
	psql=("$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres -d postgres)
	if ! out=$("${psql[@]}" -c "CREATE ROLE tokenbox LOGIN" \
		-c "CREATE DATABASE tokenbox OWNER tokenbox" 2>&1); then
		echo "$out" >&2
		stop_server
		die "creating the role and database failed"
	fi
	echo "postgresql://tokenbox@/tokenbox?host=$sock&port=$port" >"$dir/url"
	cat "$dir/url"
	;;
restart)
	[[ -d $dir/data ]] || die "no server in $dir"
	dir=$(cd "$dir" && pwd)
	need_bindir
	if running; then
		as_srv "$bindir/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1 ||
			die "the server in $dir did not stop (see $dir/server.log)"
	fi
	if ! as_srv "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
		-t "${TBX_PG_START_TIMEOUT:-120}" start >/dev/null 2>&1; then
		log_tail
		die "the server did not start again; see $dir/server.log"
	fi
	;;
stop)
	[[ -d $dir/data ]] || exit 0
	dir=$(cd "$dir" && pwd)
	need_bindir
	stop_server
	;;
url)
	[[ -f $dir/url ]] || die "no server in $dir"
	cat "$dir/url"
	;;
status)
	need_bindir
	if running; then
		echo "running (pid $(head -n 1 "$dir/data/postmaster.pid")): $(cat "$dir/url" 2>/dev/null)"
	else
		echo "stopped"
		exit 1
	fi
	;;
*)
	die "unknown command '$cmd' (see --help)"
	;;
esac
