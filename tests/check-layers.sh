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
# Calls point down too: given the build directory, every function or
# variable an object file of a layer uses (nm -u) must be defined in its
# own layer or below, or outside the product (libc, librdkafka, ...).  A
# public function is defined in some layer although include/ declares
# it: base/ calling tbx_conf_get() (consumer/conf.c) is a call upward,
# whatever header it came through.  Without a build directory only the
# includes are checked.
#
# Usage: tests/check-layers.sh [SOURCE_DIR [BUILD_DIR]]
set -uo pipefail
src=${1:-$(dirname "$0")/..}
objdir=${2:-}
if [ -n "$objdir" ]; then
	objdir=$(cd "$objdir" && pwd) || exit 2
fi
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

# Calls: the layer that defines each global symbol of the product's
# objects (CMake puts the object of LAYER/x.c in
# CMakeFiles/TARGET.dir/LAYER/x.c.o), then every symbol each object uses.
calls=""
if [ -n "$objdir" ]; then
	defs=$(mktemp)
	uses=$(mktemp)
	trap 'rm -f "$edges" "$defs" "$uses"' EXIT
	nobj=0
	for dir in base trace store outbox tokens handlers consumer testkit tools; do
		while IFS= read -r o; do
			nobj=$((nobj + 1))
			nm --defined-only -g "$o" |
				awk -v r="${rank[$dir]}" -v d="$dir" \
					'NF == 3 { print $3, r, d }' >>"$defs"
			f=${o#"$objdir"/CMakeFiles/*.dir/}
			f=${f%.o}
			nm -u "$o" | awk -v r="${rank[$dir]}" -v f="$f" \
				'{ print $NF, r, f }' >>"$uses"
		done < <(find "$objdir/CMakeFiles" -mindepth 3 -maxdepth 3 \
			-path "*/$dir/*.o")
	done
	if [ "$nobj" -eq 0 ]; then
		echo "check-layers: no object files under $objdir/CMakeFiles:" \
			"build first" >&2
		bad=1
	fi
	# A symbol defined in several layers counts as the lowest one's.
	if ! awk 'NR == FNR {
			if (!($1 in low) || $2 < low[$1]) {
				low[$1] = $2; where[$1] = $3
			}
			next
		}
		($1 in low) && low[$1] > $2 {
			printf "%s: calls %s, defined in %s/, a layer above\n",
				$3, $1, where[$1] > "/dev/stderr"
			bad = 1
		}
		END { exit bad }' "$defs" "$uses"; then
		bad=1
	fi
	calls=", every call points down"
fi

if [ "$bad" -ne 0 ]; then
	echo "check-layers: FAILED" >&2
	exit 1
fi
echo "check-layers: every include points down, no cycles$calls"
