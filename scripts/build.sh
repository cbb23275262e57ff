#!/usr/bin/env bash
# Configures and builds tokenbox with warnings as errors.
#   scripts/build.sh [--sanitize] [--dir DIR]
# --sanitize builds with ASan+UBSan (default directory build-asan);
# otherwise the directory is build.  Extra cmake -D options may follow.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=OFF
dir=
cmake_args=()
while (($#)); do
	case "$1" in
	--sanitize) sanitize=ON ;;
	--dir)
		[[ $# -ge 2 ]] || { echo "build.sh: --dir needs a value" >&2; exit 2; }
		dir=$2
		shift
		;;
	--dir=*) dir=${1#--dir=} ;;
	-D*) cmake_args+=("$1") ;;
	-h | --help)
		echo "usage: scripts/build.sh [--sanitize] [--dir DIR] [-DNAME=VALUE]..."
		exit 0
		;;
	*)
		echo "build.sh: unknown argument '$1' (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
if [[ -z "$dir" ]]; then
	if [[ $sanitize == ON ]]; then dir=build-asan; else dir=build; fi
fi

cmake -S . -B "$dir" -DTBX_WERROR=ON -DTBX_SANITIZE="$sanitize" \
	"${cmake_args[@]}"
cmake --build "$dir" -j"$(nproc)"
