#!/usr/bin/env bash
# Installs a tokenbox build into a temporary prefix, then builds the plugin
# of this directory against it the two ways docs/handlers.md shows --
# find_package(tokenbox) with tokenbox::plugin, and pkg-config's
# tokenbox-plugin -- and has the installed command load each with
# --check-config.  Also checks that the man pages and the systemd unit
# are installed, and the unit with systemd-analyze when there is one.
#   tests/oot/check.sh BUILD_DIR
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() {
	echo "check.sh: $*" >&2
	exit 1
}

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
	{ cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
for page in tokenbox tokenbox-worker tokenbox-send tokenbox-inspect tokenbox-init; do
	[[ -s $prefix/share/man/man1/$page.1 ]] || fail "no man page $page.1"
done
unit=$prefix/lib/systemd/system/tokenbox-worker@.service
[[ -s $unit ]] || fail "no systemd unit"
grep -q "^ExecStart=$prefix/bin/tokenbox worker\|^ExecStart=/.*/bin/tokenbox worker" "$unit" ||
	fail "the unit does not start the tokenbox command"
grep -qx "Type=notify" "$unit" || fail "the unit is not Type=notify"
# 2: configuration or plugin errors; 3: a token-store mismatch that stopped
# the worker (operations.md): a restart would fail the same way.
grep -qx "RestartPreventExitStatus=2 3" "$unit" ||
	fail "no RestartPreventExitStatus=2 3"

# find_package(tokenbox) + tokenbox::plugin
cmake -S "$src" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix" \
	>"$tmp/configure.log" 2>&1 ||
	{ cat "$tmp/configure.log" >&2; fail "configure failed"; }
cmake --build "$tmp/b" >"$tmp/build.log" 2>&1 ||
	{ cat "$tmp/build.log" >&2; fail "build failed"; }

# pkg-config: the include path and nothing else
pcdir=$(dirname "$(find "$prefix" -name tokenbox-plugin.pc | head -1)")
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs tokenbox-plugin)
read -r -a words <<<"$flags"
((${#words[@]} == 1)) && [[ ${words[0]} == -I* ]] &&
	[[ $(realpath "${words[0]#-I}") == $(realpath "$prefix/include") ]] ||
	fail "pkg-config tokenbox-plugin gives '$flags', not -I$prefix/include"
cc -shared -fPIC -fvisibility=hidden -Wall -Wextra -Werror $flags \
	"$src/greet.c" -o "$tmp/greet-pc.so"

for so in "$tmp/b/libgreet.so" "$tmp/greet-pc.so"; do
	[[ -f $so ]] || fail "$so was not built"
	if nm -D --undefined-only "$so" | grep -q " tbx_plugin_init"; then
		fail "$so: tbx_plugin_init is not defined"
	fi
	cat >"$tmp/w.conf" <<CONF
kafka.bootstrap.servers=127.0.0.1:1
group.id=greet
store.path=$tmp/service.db
plugin=$so
CONF
	ASAN_OPTIONS=detect_leaks=0 "$prefix/bin/tokenbox" worker \
		--config "$tmp/w.conf" --check-config >"$tmp/out" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "--check-config refused $so"; }
	grep -qx "topic greetings" "$tmp/out" || fail "$so: no topic in: $(cat "$tmp/out")"
	grep -qx "greet: store $tmp/service.db" "$tmp/err" ||
		fail "$so: the plugin did not learn the store: $(cat "$tmp/err")"
done

if command -v systemd-analyze >/dev/null; then
	mkdir "$tmp/units"
	# the command of this prefix, not the configured one
	sed "s#=/[^ ]*/bin/tokenbox #=$prefix/bin/tokenbox #" "$unit" \
		>"$tmp/units/tokenbox-worker@check.service"
	MANPATH=$prefix/share/man SYSTEMD_LOG_LEVEL=warning \
		systemd-analyze verify "$tmp/units/tokenbox-worker@check.service" \
		>"$tmp/verify" 2>&1 ||
		{ cat "$tmp/verify" >&2; fail "systemd-analyze verify failed"; }
fi
echo "check.sh: ok"
