#!/usr/bin/env bash
# Installs what building and testing tokenbox needs on Debian 12.
# Idempotent: when every package is installed already, apt is not run.
# Runs as root, or through sudo when not root.
set -euo pipefail

# groff-base: the test that the man pages (made from the --help texts)
# render without warnings.  valgrind: bench/profile (callgrind).
# postgresql, libpq-dev: scripts/pg.sh's throwaway servers and the
# PostgreSQL stores.  libcurl4-openssl-dev: the OTLP/HTTP span exporter;
# libmicrohttpd-dev: the metrics endpoint; curl: scripts/jaeger.sh.
packages=(
	build-essential cmake pkg-config
	librdkafka-dev libsqlite3-dev uuid-dev libcjson-dev libcriterion-dev
	sqlite3 kcat clang-format spin ca-certificates git
	groff-base valgrind
	clang-14 libclang-rt-14-dev
	default-jdk-headless maven
	postgresql libpq-dev
	libcurl4-openssl-dev libmicrohttpd-dev curl
)

missing=()
for pkg in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [[ "$status" != "install ok installed" ]]; then
		missing+=("$pkg")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "install-deps: all ${#packages[@]} packages are installed"
	exit 0
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-deps: not root and no sudo; install as root:" \
			"${missing[*]}" >&2
		exit 1
	fi
	as_root=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y --no-install-recommends "${missing[@]}"
