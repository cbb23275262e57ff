#!/usr/bin/env bash
# scripts/check-sources.sh checks every folder that holds C sources: a
# banned call and a badly formatted file planted in base/, store/ and
# testkit/ of a scratch tree (the folders a list by hand once skipped),
# and in a folder no list knows, are each found; the clean tree passes.
#
# Usage: tests/check-sources-test.sh [SOURCE_DIR]
set -uo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd) || exit 2
check="$src/scripts/check-sources.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0

fail() {
	echo "check-sources-test: $*" >&2
	bad=1
}

clean_tree() {
	rm -rf "$tmp/tree"
	mkdir -p "$tmp/tree/consumer"
	cp "$src/.clang-format" "$tmp/tree/"
	printf 'int tbx_ok(void)\n{\n\treturn 0;\n}\n' >"$tmp/tree/consumer/ok.c"
}

clean_tree
for what in format banned; do
	bash "$check" $what "$tmp/tree" >/dev/null 2>&1 ||
		fail "$what: the clean tree did not pass"
done

for dir in base store testkit newfolder; do
	clean_tree
	mkdir -p "$tmp/tree/$dir"
	printf '#include <stdio.h>\nvoid f(char *b, const char *s)\n{\n\tsprintf(b, "%%s", s);\n}\n' \
		>"$tmp/tree/$dir/bad.c"
	out=$(bash "$check" banned "$tmp/tree" 2>&1)
	rc=$?
	[ $rc -eq 1 ] || fail "banned: $dir/bad.c: exit $rc, not 1"
	grep -q "$dir/bad.c" <<<"$out" || fail "banned: $dir/bad.c not named: $out"

	clean_tree
	mkdir -p "$tmp/tree/$dir"
	printf 'int  g( void ){return 1;}\n' >"$tmp/tree/$dir/ugly.c"
	out=$(bash "$check" format "$tmp/tree" 2>&1)
	rc=$?
	[ $rc -eq 1 ] || fail "format: $dir/ugly.c: exit $rc, not 1"
	grep -q "$dir/ugly.c" <<<"$out" || fail "format: $dir/ugly.c not named: $out"
done

if [ $bad -ne 0 ]; then
	echo "check-sources-test: FAILED" >&2
	exit 1
fi
echo "check-sources-test: every folder is checked"
