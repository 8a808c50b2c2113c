#!/usr/bin/env bash
# Packaging check (CI, after scripts/test.sh): builds what `cmake --install` installs into
# build-package (no CUDA, no tests), installs it to a temporary prefix and checks it (libgplan.so
# exports only the functions its headers declare, the headers stand alone in C and C++, every tool answers
# --version and has a man page), builds examples/embed against it through pkg-config and through find_package (shared and
# static) and runs it against gplan-run, builds the .deb and installs it (dpkg -i), runs from it,
# removes it (dpkg -P), then builds the Python wheel, installs it in a venv and runs its tests.
# Needs root for apt-get and dpkg. Usage: scripts/package.sh
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
GP_PACKAGES+=("${GP_PACKAGE_PACKAGES[@]}")
gp_setup
cd "$GP_ROOT"
[ "$(id -u)" = 0 ] || { echo "error: scripts/package.sh installs a .deb: run it as root" >&2; exit 1; }

fail() { echo "error: $*" >&2; exit 1; }
B=$GP_ROOT/build-package
tmp=$(mktemp -d /tmp/gplan-package.XXXXXX)
deb_installed=0
cleanup() {
  if [ "$deb_installed" = 1 ]; then dpkg -P gplan >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
P=$tmp/prefix
version=$(sed -n 's/^project(gplan VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || fail "no project(gplan VERSION ...) in CMakeLists.txt"

echo "== build $B (the installed targets only) and install to a temporary prefix"
cmake -S . -B "$B" -DGPLAN_WERROR=ON -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >"$B.configure.log" 2>&1 ||
  { cat "$B.configure.log" >&2; fail "cmake configure failed"; }
cmake --build "$B" -j "$(nproc)" --target gplan-dist >"$B.build.log" 2>&1 ||
  { grep -E 'error|Error' "$B.build.log" | head -40 >&2; fail "build failed (log: $B.build.log)"; }
cmake --install "$B" --prefix "$P" >"$B.install.log" 2>&1 ||
  { cat "$B.install.log" >&2; fail "cmake --install failed"; }

echo "== the installed library: SONAME, exports, headers"
so=$P/lib/libgplan.so.0
[ -f "$P/lib/libgplan.a" ] && [ -L "$P/lib/libgplan.so" ] && [ -e "$so" ] || fail "libgplan missing in $P/lib"
readelf -d "$so" | grep -q 'SONAME.*\[libgplan\.so\.0\]' || fail "libgplan.so has no SONAME libgplan.so.0"
nm -D --defined-only "$so" | awk '{print $NF}' >"$tmp/exports"
n_exports=$(wc -l <"$tmp/exports")
[ "$n_exports" -gt 20 ] && grep -qx gp_session_eval "$tmp/exports" || fail "libgplan.so exports too little"
sed -n 's/^ *\(gp_[a-z0-9_]*\);$/\1/p' "$B/gplan.map" | sort >"$tmp/declared"
sort "$tmp/exports" | diff "$tmp/declared" - >&2 ||
  fail "libgplan.so's exports differ from the functions its headers declare (gplan.map, above)"
nm -g --defined-only "$P/lib/libgplan.a" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/static"
if grep -v '^gp_' "$tmp/static" >&2; then fail "libgplan.a defines globals outside gp_ (above)"; fi
echo "libgplan.so.0: $n_exports symbols, the functions its headers declare"
for h in "$P"/include/gplan/*.h; do
  printf '#include <gplan/%s>\ntypedef int gp_header_check;\n' "$(basename "$h")" >"$tmp/h.c"
  cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$P/include" -c "$tmp/h.c" -o "$tmp/h.o" ||
    fail "$(basename "$h") does not compile on its own"
  cp "$tmp/h.c" "$tmp/h.cc"
  c++ -std=c++17 -Wall -Wextra -Werror -pedantic -I"$P/include" -c "$tmp/h.cc" -o "$tmp/h.o" ||
    fail "$(basename "$h") does not compile from C++"
done
internal='ir\|dsl\|plan\|planner\|weights\|cpu\|runtime\|tokenizer\|family\|text\|cuda\|compile\|server'
if grep -n "#include \"\($internal\)/" "$P"/include/gplan/*.h >&2; then
  fail "an installed header includes an internal one (above)"
fi

echo "== tools: --version and man pages"
for t in "$P"/bin/gplan-*; do
  name=$(basename "$t")
  [ "$("$t" --version)" = "$name $version" ] || fail "$name --version does not print '$name $version'"
  [ -s "$P/share/man/man1/$name.1" ] || fail "no man page for $name"
done
grep -q "^version = \"$version\"" python/pyproject.toml || fail "python/pyproject.toml's version is not $version"

# A small Llama with random weights (varied ids) and what gplan-run generates from it.
plan=$tmp/llama-tiny.plan
"$P/bin/gplan-compile" examples/llama.gplan -D num_hidden_layers=2 -D hidden_size=64 \
  -D intermediate_size=128 -D num_attention_heads=4 -D num_key_value_heads=2 -D vocab_size=300 \
  -D max_position_embeddings=64 -D n_batch=16 -o "$plan" >/dev/null
expected=$("$P/bin/gplan-run" "$plan" --random-weights 3 -n 12 --threads 1 --prompt-ids 1,2,3)
[ "$(echo "$expected" | wc -w)" = 12 ] || fail "gplan-run printed '$expected'"

# examples/embed prints the text gplan-run generates from the parity GPT-2 (384 tokens) with the
# test tokenizer beside its weights: from the Hugging Face folder (planned in process, the plan
# cached under GPLAN_CACHE_DIR) and with that folder's plan made by gplan-compile.
ckpt=$tmp/gpt2-ckpt
mkdir -p "$ckpt"
cp tests/parity/gpt2/model.safetensors tests/parity/gpt2/config.json \
  tests/cli/tokenizer/tokenizer.json "$ckpt/"
"$P/bin/gplan-compile" examples/gpt2.gplan --config "$ckpt/config.json" -o "$tmp/gpt2.plan" >/dev/null
prompt="Hello, how are you?"
expected_text=$("$P/bin/gplan-run" "$tmp/gpt2.plan" --weights "$ckpt" --prompt "$prompt" -n 12)
[ -n "$expected_text" ] || fail "gplan-run printed no text"
export GPLAN_CACHE_DIR=$tmp/cache

# check_embed HOW BINARY SHARED|STATIC: runs it, compares with gplan-run, checks how it links.
check_embed() {
  local got
  got=$("$2" --plan "$tmp/gpt2.plan" "$ckpt" "$prompt" 12 2>"$tmp/embed.err") ||
    { cat "$tmp/embed.err" >&2; fail "embed ($1) failed"; }
  [ "$got" = "$expected_text" ] || fail "embed ($1) printed '$got', gplan-run '$expected_text'"
  got=$("$2" "$ckpt" "$prompt" 12 2>"$tmp/embed.err") ||
    { cat "$tmp/embed.err" >&2; fail "embed ($1) of the folder failed"; }
  [ "$got" = "$expected_text" ] ||
    fail "embed ($1) of the folder printed '$got', gplan-run '$expected_text'"
  if readelf -d "$2" | grep -q 'NEEDED.*libgplan'; then
    [ "$3" = SHARED ] || fail "embed ($1) needs libgplan.so but should be static"
  else
    [ "$3" = STATIC ] || fail "embed ($1) does not link libgplan.so"
  fi
  echo "embed ($1): $got"
}

echo "== examples/embed against $P"
export LD_LIBRARY_PATH=$P/lib
for how in shared static; do
  d=$tmp/embed-pc-$how
  cp -r examples/embed "$d"
  PKG_CONFIG_PATH="$P/lib/pkgconfig" make -s -C "$d" STATIC=$([ $how = static ] && echo 1) >/dev/null ||
    fail "embed: pkg-config build ($how) failed"
  check_embed "pkg-config, $how" "$d/embed" "$([ $how = static ] && echo STATIC || echo SHARED)"
  cmake -S examples/embed -B "$tmp/embed-cmake-$how" -DCMAKE_PREFIX_PATH="$P" \
    -DGPLAN_STATIC=$([ $how = static ] && echo ON || echo OFF) >"$tmp/embed.log" 2>&1 &&
    cmake --build "$tmp/embed-cmake-$how" >>"$tmp/embed.log" 2>&1 ||
    { cat "$tmp/embed.log" >&2; fail "embed: find_package build ($how) failed"; }
  check_embed "find_package, $how" "$tmp/embed-cmake-$how/embed" \
    "$([ $how = static ] && echo STATIC || echo SHARED)"
done
# C++ programs include the same header (extern "C") and link the same library.
printf '%s\n' '#include <gplan/gplan.h>' 'int main() {' '  char err[256] = "";' \
  '  gp_model *m = gp_model_load("/nonexistent.plan", err, sizeof err);' \
  '  return m == nullptr && err[0] ? 0 : 1;' '}' >"$tmp/cxx.cc"
c++ -std=c++17 -Wall -Wextra -Werror $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags gplan) \
  "$tmp/cxx.cc" -o "$tmp/cxx" $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --libs gplan) ||
  fail "a C++ program does not build against gplan"
"$tmp/cxx" || fail "a C++ program does not run against gplan"

# find_package's version check: 0.1 is accepted (above), another minor is not.
mkdir -p "$tmp/version-check"
printf '%s\n' 'cmake_minimum_required(VERSION 3.20)' 'project(v NONE)' \
  'find_package(gplan 0.2 QUIET)' 'if(gplan_FOUND)' '  message(FATAL_ERROR "0.2 accepted")' 'endif()' \
  >"$tmp/version-check/CMakeLists.txt"
cmake -S "$tmp/version-check" -B "$tmp/version-check/b" -DCMAKE_PREFIX_PATH="$P" >"$tmp/embed.log" 2>&1 ||
  { cat "$tmp/embed.log" >&2; fail "find_package(gplan 0.2) accepted $version"; }
unset LD_LIBRARY_PATH

echo "== Debian package: build, dpkg -i, run, dpkg -P"
if dpkg-query -W -f='${Status}' gplan 2>/dev/null | grep -q 'ok installed'; then
  fail "a gplan package is already installed (dpkg -P gplan)"
fi
(cd "$B" && cpack -G DEB >"$B.cpack.log" 2>&1) || { cat "$B.cpack.log" >&2; fail "cpack failed"; }
deb=$B/packages/gplan_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail "cpack made no $deb"
deb_installed=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i failed"; }
[ "$(/usr/bin/gplan-run --version)" = "gplan-run $version" ] || fail "/usr/bin/gplan-run --version"
[ "$(/usr/bin/gplan-run "$plan" --random-weights 3 -n 12 --threads 1 --prompt-ids 1,2,3)" = "$expected" ] ||
  fail "/usr/bin/gplan-run generates differently"
# Embedding from the system install: no paths given.
d=$tmp/embed-system
cp -r examples/embed "$d"
make -s -C "$d" >/dev/null || fail "embed against /usr failed to build"
check_embed "pkg-config, /usr" "$d/embed" SHARED
man -w gplan-run >/dev/null 2>&1 || [ -s /usr/share/man/man1/gplan-run.1 ] || fail "no man page in /usr"
echo "$(basename "$deb"): installed, /usr/bin/gplan-run --version: $(/usr/bin/gplan-run --version)"

echo "== Python: wheel, venv, pytest"
cp -r python "$tmp/python-src"
python3=/usr/bin/python3
$python3 -m pip wheel --no-deps --no-build-isolation -q -w "$tmp/dist" "$tmp/python-src" \
  >"$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log" >&2; fail "building the wheel failed"; }
whl=$tmp/dist/gplan-$version-py3-none-any.whl
[ -f "$whl" ] || fail "no $whl (made: $(ls "$tmp/dist"))"
if $python3 -m zipfile -l "$whl" | grep -E '\.(so|pyd|dylib)' >&2; then fail "the wheel holds compiled code"; fi
# --system-site-packages: pytest and numpy from Debian (no index is reached).
$python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-deps --no-index "$whl" >"$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log" >&2; fail "pip install of the wheel failed"; }
# run_pytest LABEL [VAR=VALUE...]: the tests with the wheel's gplan (not python/ of the tree).
run_pytest() {
  local label=$1 rc=0
  shift
  (cd "$tmp" && env "$@" PATH="$P/bin:$PATH" "$tmp/venv/bin/python" -c \
     'import gplan, sys; sys.exit(0 if "/venv/" in gplan.__file__ else 1)') ||
    fail "the venv does not import the installed wheel"
  (cd "$tmp" && env "$@" PATH="$P/bin:$PATH" "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider \
     "$GP_ROOT/python/tests") || rc=$?
  [ "$rc" = 5 ] && fail "pytest collected no tests ($label)"
  [ "$rc" = 0 ] || fail "pytest failed ($label)"
  echo "pytest ($label): passed"
}
run_pytest "libgplan from the system path, the .deb's"
# Removed and purged (-P: not even dpkg's record of it is left).
dpkg -P gplan >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -P gplan failed"; }
deb_installed=0
[ ! -e /usr/bin/gplan-run ] && [ ! -e /usr/lib/libgplan.so.0 ] || fail "dpkg -P left files behind"
! dpkg-query -W gplan >/dev/null 2>&1 || fail "dpkg still lists gplan"
run_pytest "GPLAN_LIBRARY=$so" GPLAN_LIBRARY="$so"
echo "== packaging checks passed"
