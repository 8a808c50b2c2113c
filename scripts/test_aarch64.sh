#!/usr/bin/env bash
# The CPU kernels on aarch64: gp_core, gp_cpu and their test suites (GPLAN_KERNELS_ONLY) built with
# Debian's cross compiler (cmake/aarch64.cmake), the suites run under qemu-user on three processor
# models: max (NEON, dotprod and i8mm: the suites force every variant in turn), Cortex-A76
# (dotprod, no i8mm) and Cortex-A53 (neither: the plain NEON path, and what the HWCAP bits pick).
# Correctness only: qemu's timings say nothing of a processor's (bench/quant-notes.md).
# --full instead builds the whole project (no CUDA; no gplan-serve: libmicrohttpd's TLS stack is
# not fetched) against arm64 packages that apt-get download fetches and dpkg -x unpacks into
# BUILD_DIR-sysroot (nothing installed), then runs every CUnit suite under -cpu max: some 5
# minutes more, not part of scripts/test.sh.
# Usage: scripts/test_aarch64.sh [--full] [BUILD_DIR]  (default build-aarch64, build-aarch64-full).
# Exits 0 when every suite passes, 1 when one fails, 77 (skipped) when the cross compiler,
# qemu-user or CUnit for arm64 is missing (scripts/setup.sh's GP_TEST_PACKAGES has them).
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
full=0
if [ "${1:-}" = "--full" ]; then
  full=1
  shift
fi
suffix=
[ "$full" = 0 ] || suffix=-full
dir=${1:-$GP_ROOT/build-aarch64$suffix}
missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/include/stdio.h ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null ||
  missing+=(qemu-user)
[ -e /usr/lib/aarch64-linux-gnu/libcunit.a ] || [ -e /usr/lib/aarch64-linux-gnu/libcunit.so ] ||
  missing+=(libcunit1-dev:arm64)
if [ ${#missing[@]} -gt 0 ]; then
  echo "aarch64: skipped (missing: ${missing[*]})"
  exit 77
fi
start=$(date +%s)
mkdir -p "$dir"
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
if [ "$full" = 1 ]; then
  sysroot=$dir-sysroot
  if [ ! -e "$sysroot/.unpacked" ]; then
    rm -rf "$sysroot" && mkdir -p "$sysroot/debs"
    (cd "$sysroot/debs" && apt-get download zlib1g-dev:arm64 zlib1g:arm64 libjansson-dev:arm64 \
       libjansson4:arm64 libpcre2-dev:arm64 libpcre2-8-0:arm64 libutf8proc-dev:arm64 \
       libutf8proc2:arm64 libcunit1-dev:arm64 libcunit1:arm64 >/dev/null 2>&1) ||
      { echo "error: apt-get download of the arm64 packages failed" >&2; exit 1; }
    for f in "$sysroot"/debs/*.deb; do dpkg -x "$f" "$sysroot"; done
    touch "$sysroot/.unpacked"
  fi
  export PKG_CONFIG_LIBDIR=$sysroot/usr/lib/aarch64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$sysroot
  cmake -S "$GP_ROOT" -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$GP_ROOT/cmake/aarch64.cmake" \
    -DGPLAN_AARCH64_SYSROOT="$sysroot" -DGPLAN_CUDA=OFF -DGPLAN_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log" >&2; echo "error: aarch64 configure failed" >&2; exit 1; }
  if ! cmake --build "$dir" -j "$(nproc)" >"$dir.build.log" 2>&1; then
    grep -E 'error|Error' "$dir.build.log" | head -40 >&2
    echo "error: aarch64 build failed (full log: $dir.build.log)" >&2
    exit 1
  fi
  # linked against the sysroot's shared libraries: the loader and C library of libc6:arm64 (which
  # libcunit1-dev:arm64 brought), the others from the sysroot
  echo "== aarch64 (whole project) under qemu -cpu max: every CUnit suite"
  QEMU_CPU=max QEMU_SET_ENV=LD_LIBRARY_PATH=$sysroot/usr/lib/aarch64-linux-gnu \
    "$qemu" "$dir/tests/gplan_tests" | tail -6 ||
    { echo "error: aarch64 suites failed" >&2; exit 1; }
  echo "aarch64 (whole project): passed ($(($(date +%s) - start)) s)"
  exit 0
fi
cmake -S "$GP_ROOT" -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$GP_ROOT/cmake/aarch64.cmake" \
  -DGPLAN_KERNELS_ONLY=ON -DGPLAN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log" >&2; echo "error: aarch64 configure failed" >&2; exit 1; }
if ! cmake --build "$dir" -j "$(nproc)" --target gplan_tests >"$dir.build.log" 2>&1; then
  grep -E 'error|Error' "$dir.build.log" | head -40 >&2
  echo "error: aarch64 build failed (full log: $dir.build.log)" >&2
  exit 1
fi
# ctest runs each suite through qemu (the toolchain's CMAKE_CROSSCOMPILING_EMULATOR); QEMU_CPU
# picks the model. On max, the suites that hold the kernels' tests: kernels (float products,
# attention, every kernel build the same bits), quant (formats, the ISA selector) and quant_f32
# (the quantized products on every path, every integer variant forced in turn: against double,
# the bound, the emulation, each other). On the two smaller models, the selector (which paths the
# HWCAP bits allow, what AUTO picks) and the integer paths' tests on the variants they allow, both
# models at once.
echo "== aarch64 under qemu -cpu max: kernels, quant, quant_f32"
(cd "$dir" && QEMU_CPU=max ctest --output-on-failure -j "$(nproc)" -R '^(kernels|quant|quant_f32)$') ||
  { echo "error: aarch64 suites failed on -cpu max" >&2; exit 1; }
for cpu in cortex-a76 cortex-a53; do
  (export QEMU_CPU=$cpu GPLAN_TEST_VERBOSE=1
   "$qemu" "$dir/tests/gplan_tests" quant &&
     GPLAN_TEST_ONLY="integer paths" "$qemu" "$dir/tests/gplan_tests" quant_f32) >"$dir.$cpu.log" 2>&1 &
done
fail=0
for cpu in cortex-a76 cortex-a53; do
  wait -n || fail=1
done
for cpu in cortex-a76 cortex-a53; do
  echo "== aarch64 under qemu -cpu $cpu: quant, quant_f32's integer paths"
  grep -E 'paths:|integer paths' "$dir.$cpu.log" | sed 's/^ */   /'
done
if [ "$fail" != 0 ]; then
  cat "$dir.cortex-a76.log" "$dir.cortex-a53.log" >&2
  echo "error: aarch64 suites failed on a smaller model (logs above)" >&2
  exit 1
fi
echo "aarch64: passed ($(($(date +%s) - start)) s: the build and three processor models)"
