#!/bin/sh
# A small copy of llama.cpp's source tree (SRC_DIR: a checkout, or llama-cpp-python's sdist's
# vendor/llama.cpp) as OUT.tar.xz, for building llama.cpp's CUDA tools on the GPU machine, whose
# transfers are limited to 64 MiB (the whole tree is ~180 MB, models and docs mostly) and which
# reaches no network. It holds what these two lines need, run in the extracted folder:
#   cmake -B b -DGGML_CUDA=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
#     -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release
#   cmake --build b --target llama-bench llama-batched-bench llama-server llama-quantize
# Kept: the CMake files, ggml with its CPU and CUDA backends (the others' folders are dropped:
# ggml/src/CMakeLists.txt adds a backend's folder only when that backend is on), src, include,
# common, vendor (json, cpp-httplib, miniaudio and stb for mtmd, which the server links), app (the
# unified binary, on by default) and every tool that tools/CMakeLists.txt adds with these options
# (all but rpc and tuning), less their tests and sample media. Of tools/ui (the server's web UI)
# only the templates of the ui.cpp/ui.h the build generates: the UI is not in the tree; at build
# time scripts/ui-assets.cmake downloads it or, offline, embeds none (a warning; the server's API
# works without it; -DLLAMA_USE_PREBUILT_UI=OFF skips the download).
# usage: bench/llamacpp_trim.sh SRC_DIR OUT.tar.xz   (prints OUT's size)
set -eu
[ $# -eq 2 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
src=$1 out=$2
if [ ! -f "$src/CMakeLists.txt" ] || [ ! -d "$src/ggml/src/ggml-cuda" ]; then
  echo "$src: not a llama.cpp source tree (no CMakeLists.txt, ggml/src/ggml-cuda)" >&2
  exit 1
fi

# ggml/src: its files and the CPU and CUDA backends' folders
paths="CMakeLists.txt LICENSE licenses cmake include src common vendor app scripts/ui-assets.cmake
ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src/ggml-cpu ggml/src/ggml-cuda"
for p in "$src"/ggml/src/*; do
  [ -f "$p" ] && paths="$paths ggml/src/${p##*/}"
done
# tools: all that tools/CMakeLists.txt adds with GGML_RPC and GGML_METAL off; ui's templates only
paths="$paths tools/CMakeLists.txt tools/ui/CMakeLists.txt tools/ui/sources.cmake
tools/ui/ui.cpp.in tools/ui/ui.h.in"
for p in "$src"/tools/*/; do
  t=${p%/}
  t=${t##*/}
  case $t in rpc | tuning | ui) ;; *) paths="$paths tools/$t" ;; esac
done
for p in $paths; do
  [ -e "$src/$p" ] || { echo "$src: no $p (another llama.cpp layout?)" >&2; exit 1; }
done

# Sorted names, fixed owners and times, one xz thread: the same tree gives the same bytes.
# shellcheck disable=SC2086 # $paths is a list of names without blanks
tar -C "$src" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  --exclude=tools/server/tests --exclude=tools/server/bench --exclude=tools/mtmd/tests \
  --exclude='tools/mtmd/test-*' --exclude=tools/mtmd/legacy-models --exclude=__pycache__ \
  -cf - $paths | xz -9e -T1 >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $(wc -c <"$out") bytes"
