#!/usr/bin/env bash
# scripts/pg.sh starts a throwaway PostgreSQL server in a temporary
# directory, psql connects to the URL it prints and runs SELECT 1 as the
# test role (and so does SELECT1_PROGRAM, a libpq program, when given),
# and stop removes the server again.  Exits 77 (skipped) only
# where the PostgreSQL server is not installed.
set -u

src=${1:?usage: server_starts.sh SOURCE_DIR [SELECT1_PROGRAM]}
select1=${2:-}
pg="$src/scripts/pg.sh"
[ -f "$pg" ] || { echo "FAIL: $pg not found"; exit 1; }
if ! bindir=$(bash "$pg" bindir); then
	echo "skipped: the PostgreSQL server is not installed (Debian: postgresql; bash scripts/install-deps.sh)"
	exit 77
fi

# /tmp, opened for traversal: as root the server runs as "postgres".
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tbx-pg.XXXXXX")
chmod 0755 "$tmp"
cleanup() {
	bash "$pg" stop --dir "$tmp/pg" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	[ -f "$tmp/pg/server.log" ] && tail -n 20 "$tmp/pg/server.log"
	exit 1
}

url=$(bash "$pg" start --dir "$tmp/pg") || fail "scripts/pg.sh start failed"
case $url in
postgresql://*'?host='"$tmp/pg/sock"'&port='*) ;;
*) fail "unexpected URL '$url'" ;;
esac
[ "$(bash "$pg" url --dir "$tmp/pg")" = "$url" ] || fail "pg.sh url differs from start's"
bash "$pg" status --dir "$tmp/pg" >/dev/null || fail "pg.sh status says the server is not running"

got=$("$bindir/psql" "$url" -X -A -t -v ON_ERROR_STOP=1 \
	-c "SELECT 1, current_user, current_database(), current_setting('listen_addresses') = ''") ||
	fail "psql could not connect to $url"
[ "$got" = "1|tokenbox|tokenbox|t" ] || fail "SELECT 1 gave '$got'"
if [ -n "$select1" ]; then
	"$select1" "$url" || fail "the libpq program could not SELECT 1"
fi

# A second start in the same directory is refused while the first runs.
if bash "$pg" start --dir "$tmp/pg" >/dev/null 2>&1; then
	fail "a second start in the same directory was not refused"
fi

bash "$pg" stop --dir "$tmp/pg" || fail "pg.sh stop failed"
if bash "$pg" status --dir "$tmp/pg" >/dev/null 2>&1; then
	fail "the server still runs after stop"
fi
[ ! -e "$tmp/pg/data" ] || fail "stop left the data directory"
if "$bindir/psql" "$url" -X -A -t -c "SELECT 1" >/dev/null 2>&1; then
	fail "psql still connects after stop"
fi
echo "ok: started, SELECT 1 over $url, stopped"
