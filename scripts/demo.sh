#!/usr/bin/env bash
# Installs the dependencies, builds, and runs `tokenbox demo` with the
# arguments given (see `./build/tokenbox help demo`).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh --dir build
exec ./build/tokenbox demo "$@"
