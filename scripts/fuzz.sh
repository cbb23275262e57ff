#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (-fsanitize=fuzzer,
# address,undefined) and runs each for a bounded time on its checked-in
# corpus.  New inputs go to a scratch directory, never into fuzz/corpus/
# unless --merge is given.  A crash, leak, sanitizer report or failed
# check stops that target and fails the script, naming the input file.
#
#   scripts/fuzz.sh [--time SECONDS] [--dir DIR] [--target NAME]...
#                   [--merge] [--jobs N]
#
# --time     seconds per target (default 20)
# --dir      the build directory (default build-fuzz)
# --target   run only NAME (headers, stored_headers, stored_row, config,
#            trace_headers, tbit, cover, wire, otlp_proto);
#            repeat for more
# --merge    afterwards, minimise the corpus plus what the run found back
#            into fuzz/corpus/NAME (commit the result); files named seed_*
#            (written by hand) and bug_* (inputs of fixed bugs) are kept
# --jobs N   libFuzzer processes per target (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
dir=build-fuzz
targets=()
merge=0
jobs=1
while (($#)); do
	case "$1" in
	--time | --dir | --target | --jobs)
		[[ $# -ge 2 ]] || { echo "fuzz.sh: $1 needs a value" >&2; exit 2; }
		case "$1" in
		--time) seconds=$2 ;;
		--dir) dir=$2 ;;
		--target) targets+=("$2") ;;
		--jobs) jobs=$2 ;;
		esac
		shift
		;;
	--merge) merge=1 ;;
	-h | --help)
		sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "fuzz.sh: unknown argument '$1' (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time: '$seconds' is not a positive integer" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs: '$jobs' is not a positive integer" >&2; exit 2; }
[[ $dir == /* ]] || dir=$PWD/$dir
root=$PWD
if ((${#targets[@]} == 0)); then
	targets=(headers stored_headers stored_row config trace_headers tbit cover wire otlp_proto)
fi
for t in "${targets[@]}"; do
	[[ -d fuzz/corpus/$t ]] || { echo "fuzz.sh: --target: no target '$t' (fuzz/corpus/$t missing)" >&2; exit 2; }
done
command -v clang-14 >/dev/null || { echo "fuzz.sh: clang-14 not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

# The library is instrumented for coverage (fuzzer-no-link) and built with
# ASan+UBSan (TBX_SANITIZE); only the targets link libFuzzer's main.
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang-14 -DTBX_WERROR=ON \
	-DTBX_SANITIZE=ON -DTBX_TESTS=OFF -DTBX_FUZZ=ON \
	-DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

scratch=$(mktemp -d /tmp/tokenbox-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# Reports on standard error (into each target's log), whatever the caller
# set: test.sh sends its own suites' reports to files.
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for t in "${targets[@]}"; do
	mkdir -p "$scratch/$t/new" "$scratch/$t/artifacts"
	echo "=== fuzz.sh: $t for ${seconds}s"
	# -timeout: one input may take this long; -rss_limit_mb: a target
	# that needs more has a leak or an unbounded allocation.
	# With --jobs, libFuzzer writes each process's output to
	# fuzz-N.log in the current directory: run it in the scratch one.
	parallel=()
	if ((jobs > 1)); then
		parallel=(-jobs="$jobs" -workers="$jobs")
	fi
	if ! (cd "$scratch/$t" && "$dir/fuzz/fuzz_$t" \
		-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "${parallel[@]}" \
		-artifact_prefix="$scratch/$t/artifacts/" \
		"$scratch/$t/new" "$root/fuzz/corpus/$t") 2>"$scratch/$t/log"; then
		tail -n 60 "$scratch/$t/log" "$scratch/$t"/fuzz-*.log >&2 2>/dev/null || true
		for a in "$scratch/$t/artifacts"/*; do
			[[ -e $a ]] || continue
			mkdir -p "fuzz/findings/$t"
			cp "$a" "fuzz/findings/$t/"
			echo "fuzz.sh: $t: finding kept as fuzz/findings/$t/$(basename "$a")" >&2
		done
		failed+=("$t")
		continue
	fi
	grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' \
		"$scratch/$t/log" || true
	if ((merge)); then
		mkdir -p "$scratch/$t/merged"
		"$dir/fuzz/fuzz_$t" -merge=1 "$scratch/$t/merged" \
			"fuzz/corpus/$t" "$scratch/$t/new" 2>>"$scratch/$t/log"
		# Hand-written seeds (seed_*) and the inputs of fixed bugs
		# (bug_*) stay as they are; the rest is what the merge kept.
		find "fuzz/corpus/$t" -type f ! -name 'seed_*' ! -name 'bug_*' \
			-delete
		# The merge names files by their SHA-1: skip copies of those.
		kept=$(find "fuzz/corpus/$t" -type f -exec sha1sum {} + |
			cut -d' ' -f1)
		for f in "$scratch/$t/merged"/*; do
			[[ -e $f ]] || continue
			grep -qxF "$(basename "$f")" <<<"$kept" ||
				cp "$f" "fuzz/corpus/$t/"
		done
		echo "fuzz.sh: $t: corpus minimised to $(ls "fuzz/corpus/$t" | wc -l) files"
	fi
done
if ((${#failed[@]})); then
	echo "fuzz.sh: FAIL: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz.sh: PASS: ${targets[*]}"
