#!/usr/bin/env bash
# Every include points down: a file may include headers of its own folder
# and of the folders below it, never of a folder above.  The layers, from
# the ground floor up (docs/architecture.md, "Layers"):
#
#   base  ->  trace  ->  store  ->  outbox  ->  tokens  ->  handlers
#         ->  consumer
#         ->  testkit, tools
#
# include/ (the public headers) sits below everything.  bench/, examples/,
# fuzz/ and tests/ stand outside the product and may include any layer.
# Also fails on an include cycle between two files of the product.
#
# Usage: tests/check-layers.sh [SOURCE_DIR]
set -uo pipefail
src=${1:-$(dirname "$0")/..}
cd "$src" || exit 2

declare -A rank=([include]=0 [base]=1 [trace]=2 [store]=3 [outbox]=4
	[tokens]=5 [handlers]=6 [consumer]=7 [testkit]=8 [tools]=8)
bad=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

for dir in base trace store outbox tokens handlers consumer testkit tools; do
	[ -d "$dir" ] || continue
	for f in "$dir"/*.c "$dir"/*.h; do
		[ -e "$f" ] || continue
		while IFS= read -r line; do
			inc=${line#*\"}
			inc=${inc%%\"*}
			top=${inc%%/*}
			# "tokenbox/..." is the public header folder, include/.
			[ "$top" = tokenbox ] && top=include
			if [ -z "${rank[$top]+x}" ]; then
				echo "$f: includes \"$inc\" from outside the layers" >&2
				bad=1
				continue
			fi
			if [ "${rank[$top]}" -gt "${rank[$dir]}" ]; then
				echo "$f: includes \"$inc\" from $top/, a layer above $dir/" >&2
				bad=1
			fi
			[ "$top" != include ] && echo "$f $inc" >>"$edges"
		done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
	done
done

# A cycle between files: tsort names the loop it cannot order.  A file's
# own header (x.c -> x.h) is an ordinary edge.
if ! out=$(awk '{print $2, $1}' "$edges" | tsort 2>&1 >/dev/null); then
	echo "include cycle:" >&2
	echo "$out" >&2
	bad=1
elif [ -n "$out" ]; then
	echo "include cycle:" >&2
	echo "$out" >&2
	bad=1
fi

if [ "$bad" -ne 0 ]; then
	echo "check-layers: FAILED" >&2
	exit 1
fi
echo "check-layers: every include points down, no cycles"
