#!/usr/bin/env bash
# The source checks of scripts/test.sh, over every folder that holds C
# sources (found, not listed: a list by hand once left base/, store/ and
# testkit/ unchecked):
#
#   format   clang-format --dry-run --Werror (the repository's .clang-format)
#   banned   no sprintf, vsprintf, strcpy or strcat (snprintf and
#            tbx__strlcpy instead)
#
# The sources are the files git tracks (build directories hold generated
# C files); outside a git checkout, every *.c and *.h but those under
# build*/.  Exit status 0 when the check passes, 1 when it finds
# something (named on standard error), 2 on a usage error.
#
# Usage: scripts/check-sources.sh format|banned [SOURCE_DIR]
set -uo pipefail
what=${1:-}
src=${2:-$(dirname "$0")/..}
case $what in
format | banned) ;;
*)
	echo "usage: check-sources.sh format|banned [SOURCE_DIR]" >&2
	exit 2
	;;
esac
cd "$src" || exit 2

sources() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -- '*.c' '*.h'
	else
		find . -mindepth 2 -type f \( -name '*.c' -o -name '*.h' \) \
			-not -path './build*' | cut -c3-
	fi
}
dirs=()
while IFS= read -r d; do
	dirs+=("$d")
done < <(sources | grep / | cut -d/ -f1 | sort -u)
if ((${#dirs[@]} == 0)); then
	echo "check-sources: no C sources under $PWD" >&2
	exit 2
fi

if [ "$what" = format ]; then
	find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \) -print0 |
		xargs -0 -r clang-format --dry-run --Werror || exit 1
	echo "check-sources: format clean in ${dirs[*]}"
	exit 0
fi
# snprintf, strncpy etc. do not match: \b needs a non-word before.
if grep -rnE '\b(v?sprintf|strcpy|strcat)[[:space:]]*\(' \
	--include='*.c' --include='*.h' "${dirs[@]}" >&2; then
	echo "banned: use snprintf / tbx__strlcpy instead" >&2
	exit 1
fi
echo "check-sources: no banned call in ${dirs[*]}"
