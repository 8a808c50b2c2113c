#!/bin/sh
# The processor as the benchmarks name it: "MODEL NAME (family F model M; FLAG ...)", of the
# FLAGs given those /proc/cpuinfo lists. Usage: scripts/bench/machine.sh FLAG...
field() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
flags=
for f in "$@"; do
  grep -m1 '^\(flags\|Features\)' /proc/cpuinfo | grep -qw "$f" && flags="$flags $f"
done
echo "$(field 'model name') (family $(field 'cpu family') model $(field 'model\s');$flags)"
