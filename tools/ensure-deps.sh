#!/usr/bin/env bash
# Make sure the Debian packages of one purpose are installed: building is not testing,
# and an operator who only builds dlockd gets no test toolchain.
#
#   tools/ensure-deps.sh [GROUP...]        no GROUP: build
#
#   build     compile the library, dlock, dlockd, dlock-bench and the examples (`make`)
#   demo      run `make demo` and dlock-bench: redis-server, redis-benchmark, php with
#             phpredis, and predis (dlock-bench's W5/php-package-predis), python3 with
#             redis-py (W5/py-package, W5/peer-redis-py), node with the Node package
#             built (W5/node-package) and node-redlock (W5/peer-node-redlock, the npm
#             packages bench/peers/package-lock.json pins)
#   test      build and run every test (`make tests`, `make test`): build and demo, and the
#             test harness's tools, and the npm packages of the Node tests at the exact
#             versions their package-lock.json pins (tests/service/clients/node:
#             ioredis; clients/node: ioredis and the TypeScript compiler)
#   deb       build and check Debian packages (`make deb`): debhelper, dpkg-dev, lintian
#   model     `make model`: Spin
#   valgrind, format, clang    one tool each (test-valgrind, format-check, the fuzzers)
#
# As root, missing Debian packages are installed with apt-get; otherwise the exact
# command is printed and the script fails, so `make` stops with a message instead of a
# confusing compiler error. The npm packages are installed by `npm ci` into that
# directory's node_modules (ignored by git), again only when they are missing or the
# lock file changed: a build after it downloads nothing.
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build)

pkgs=()
npm=0
add_build() {
  # libssl-dev: rediss:// (TLS) in the library and TLS for dlockd's clients; libuv1-dev:
  # dlockd's event loop.
  pkgs+=(cmake make gcc pkg-config libhiredis-dev libssl-dev libuv1-dev)
  # libmicrohttpd-dev: dlockd's HTTP listener for Prometheus and health checks
  # (--metrics-port), so that dlockd parses no HTTP itself; it is required to build
  # dlockd, used or not.
  pkgs+=(libmicrohttpd-dev)
}
add_node() {
  # A machine with node and npm (Debian's, or another build on PATH) keeps them:
  # Debian's npm would not install beside another nodejs.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    pkgs+=(nodejs npm)
  fi
  npm=1
}
add_demo() {
  # redis-benchmark (the bench's baseline) and redis-cli come with redis-tools; the PHP
  # buyers of the demo and of W5 use phpredis, and W5/php-package-predis predis;
  # W5/py-raw and W5/py-package run Python with redis-py, W5/node-package the Node
  # package, built below.
  pkgs+=(redis-server redis-tools php-cli php-redis php-predis python3 python3-redis)
  add_node
}
for group in "${groups[@]}"; do
  case "$group" in
  build) add_build ;;
  demo) add_demo ;;
  test)
    add_build
    add_demo
    pkgs+=(libcmocka-dev)
    # The openssl command makes the TLS tests' certificates, as docs/guide.md shows.
    pkgs+=(openssl)
    # The Redis clients dlockd's tests use as any user would.
    pkgs+=(python3-redis)
    # The fault suite's network-namespace tier (fault_partition) builds its network with
    # ip(8) and iptables-restore(8); a fresh Debian 12 has neither for certain, and the
    # test fails (never skips) without them.
    pkgs+=(iproute2 iptables)
    # redis-servers on a clock of their own (the test support's dh_server_opts.clock):
    # libfaketime, preloaded into them.
    pkgs+=(libfaketime)
    # A real seccomp filter (test_no_randomness: the kernel refusing getrandom).
    pkgs+=(libseccomp-dev)
    # dlockd's /metrics checked by promtool and scraped by a real Prometheus server
    # (test_dlockd_metrics); the package has both.
    pkgs+=(prometheus)
    # PHP-FPM workers whose persistent connections outlive each request
    # (test_dlockd_php): php-fpm runs one, and cgi-fcgi from libfcgi-bin sends it
    # FastCGI requests as a web server would.
    pkgs+=(php-fpm libfcgi-bin)
    # The PHP package's tests (clients/php): PHPUnit, and the predis client and Symfony
    # Lock it works with, all from Debian.
    pkgs+=(phpunit php-predis php-symfony-lock)
    # The Python package's tests (clients/python): pytest, and pip, setuptools, wheel
    # and venv to install it offline into a venv over the system's redis-py, as its
    # README says.
    pkgs+=(python3-pytest python3-pip python3-setuptools python3-wheel python3-venv)
    # Node for the ioredis client test and the Node package's.
    add_node
    ;;
  # No fakeroot: debian/control says Rules-Requires-Root: no. systemd: systemd-analyze
  # checks the unit the dlockd package ships (tests/install/check.sh).
  deb) pkgs+=(debhelper dpkg-dev lintian systemd) ;;
  model) pkgs+=(spin) ;;
  valgrind) pkgs+=(valgrind) ;;
  format) pkgs+=(clang-format) ;;
  clang) pkgs+=(clang libclang-rt-14-dev) ;;
  *)
    echo "ensure-deps.sh: unknown group '$group' (build, demo, test, deb, model, valgrind, format, clang)" >&2
    exit 2
    ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # One name once, in the order first asked for.
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
  if [ "$(id -u)" -ne 0 ]; then
    echo "dlock needs these Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

[ "$npm" = 1 ] || exit 0
# The npm packages, installed exactly as locked (npm ci), when node_modules is not what
# the lock file says: a copy of the lock file kept in node_modules records the last
# install. No install scripts run: no project needs one. The raw ioredis test
# (tests/service/clients/node), the Node package (clients/node, whose TypeScript
# compiler comes this way too; its test builds it) and dlock-bench's W5 peer
# node-redlock (bench/peers).
root="$(cd "$(dirname "$0")/.." && pwd)"
for node_dir in "$root/tests/service/clients/node" "$root/clients/node" "$root/bench/peers"; do
  stamp="$node_dir/node_modules/.dlock-package-lock.json"
  if ! cmp -s "$node_dir/package-lock.json" "$stamp"; then
    echo "installing the npm packages of $node_dir (npm ci)" >&2
    (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
    cp "$node_dir/package-lock.json" "$stamp"
  fi
done
# The Node package compiled (tsc, offline) when its JavaScript is missing or older than
# a source: dlock-bench loads it, and its test builds it again anyway.
pkg="$root/clients/node"
if [ ! -f "$pkg/dist/index.js" ] || [ -n "$(find "$pkg/src" "$pkg/tsconfig.json" -newer "$pkg/dist/index.js" 2>/dev/null)" ]; then
  echo "building the Node package in $pkg (npm run build)" >&2
  (cd "$pkg" && npm run --silent build >&2)
fi
