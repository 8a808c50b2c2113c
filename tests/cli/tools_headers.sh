#!/bin/sh
# The tools are mains over the installed API: every header a tools/*.c includes in quotes is
# "gplan/NAME.h" with include/gplan/NAME.h (or NAME.h.in, generated) in the tree and named by the
# install rules (cmake/gplan_install.cmake); system and third-party headers come in <...>.
# Usage: tools_headers.sh SOURCE_DIR
set -u
src=$1
failed=0
for f in "$src"/tools/*.c; do
  for h in $(sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f"); do
    name=${h#gplan/}
    if [ "$name" = "$h" ] || case "$name" in */*) true ;; *) false ;; esac; then
      echo "FAIL: ${f#"$src"/} includes \"$h\", not an installed gplan/ header"
      failed=1
    elif [ ! -e "$src/include/gplan/$name" ] && [ ! -e "$src/include/gplan/$name.in" ]; then
      echo "FAIL: ${f#"$src"/} includes \"$h\": no include/gplan/$name"
      failed=1
    elif ! grep -Eq "(^|[ /(])${name%.h}\.h([ )]|\$)" "$src/cmake/gplan_install.cmake"; then
      echo "FAIL: ${f#"$src"/} includes \"$h\", which cmake/gplan_install.cmake does not install"
      failed=1
    fi
  done
done
[ "$failed" = 0 ] && echo "tools: every quoted include is an installed <gplan/...> header"
exit "$failed"
