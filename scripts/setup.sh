#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: makes sure the Debian packages gplan needs
# are present (installing them with apt-get when run as root), then configures and builds into
# $BUILD (default: build). Sourced, not run.
GP_PACKAGES=(cmake make gcc pkg-config flex bison libcunit1-dev zlib1g-dev libjansson-dev libpcre2-dev libutf8proc-dev
  libmicrohttpd-dev)
# What scripts/test.sh needs on top: valgrind for the memcheck run, clang and its libFuzzer
# runtime for scripts/fuzz.sh (Debian 12's clang is 14), pytest and numpy for the Python binding's
# tests (ctest's python entry), the aarch64 cross compiler, qemu-user and CUnit for arm64 (from
# Debian's multiarch: gp_setup adds the architecture) for scripts/test_aarch64.sh.
GP_TEST_PACKAGES=(valgrind clang libclang-rt-14-dev python3-pytest python3-numpy
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libcunit1-dev:arm64)
# What scripts/package.sh needs on top: help2man for the man pages, dpkg-dev for cpack's Depends
# (dpkg-shlibdeps), g++ to include the header from C++, Python's venv, pip, setuptools, pytest and
# numpy for the wheel and its tests.
GP_PACKAGE_PACKAGES=(help2man dpkg-dev g++ python3-venv python3-pip python3-setuptools python3-wheel
  python3-pytest python3-numpy)

gp_missing_packages() {
  local missing=()
  for p in "${GP_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  echo "${missing[@]}"
}

gp_setup() {
  local missing
  missing=$(gp_missing_packages)
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "== installing: $missing"
      export DEBIAN_FRONTEND=noninteractive
      # packages of another architecture (libcunit1-dev:arm64) need it known to dpkg, then a fresh
      # package list
      local arch
      for arch in $(printf '%s\n' $missing | sed -n 's/.*:\([a-z0-9]*\)$/\1/p' | sort -u); do
        if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
          dpkg --add-architecture "$arch" && apt-get update >/dev/null
        fi
      done
      apt-get install -y --no-install-recommends $missing >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends $missing >/dev/null; } ||
        { echo "error: could not install: $missing" >&2; exit 1; }
    else
      echo "error: missing Debian packages: $missing" >&2
      echo "install them with: sudo apt-get install $missing" >&2
      exit 1
    fi
  fi
}

# gp_build DIR [cmake args...]: configure and build into DIR.
gp_build() {
  local dir=$1; shift
  cmake -S "$GP_ROOT" -B "$dir" "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log" >&2; echo "error: cmake configure failed" >&2; exit 1; }
  if ! cmake --build "$dir" -j "$(nproc)" >"$dir.build.log" 2>&1; then
    grep -E 'error|Error' "$dir.build.log" | head -40 >&2
    echo "error: build failed (full log: $dir.build.log)" >&2
    exit 1
  fi
  grep -E 'warning:' "$dir.build.log" >&2 || true
}
