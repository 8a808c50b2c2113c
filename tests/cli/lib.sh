# shellcheck shell=sh disable=SC2034,SC2154  # failed is read and tool set by the sourcing script
# Helpers shared by the command-line tests (sourced after setting $tool, the program under test).
failed=0

# tool_src_tmp TOOL SOURCE_DIR TMP_DIR: the arguments of a script that tests one tool, as $tool,
# $src and $tmp (made).
tool_src_tmp() { tool=$1 src=$2 tmp=$3; mkdir -p "$tmp"; }

fail() { echo "FAIL: $*"; failed=1; }

# expect_run HOW LINES LABEL STATUS TEXT COMMAND...: COMMAND must exit with STATUS and print TEXT
# (a fixed string; HOW "line": a whole output line, exactly; "text": anywhere) on stdout or stderr;
# on failure a FAIL line starting with LABEL, then the first LINES lines of its output.
expect_run() {
  how=$1 lines=$2 label=$3 want=$4 text=$5
  shift 5
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$label: exit status $rc, expected $want"
    printf '%s\n' "$out" | head -"$lines"
  elif [ "$how" = line ] && ! printf '%s\n' "$out" | grep -qxF -- "$text"; then
    fail "$label: no output line is exactly: $text"
    printf '%s\n' "$out" | head -"$lines"
  elif [ "$how" = text ] && ! printf '%s\n' "$out" | grep -qF -- "$text"; then
    fail "$label: output lacks: $text"
    printf '%s\n' "$out" | head -"$lines"
  fi
}

# expect_cmd STATUS TEXT COMMAND...: COMMAND must exit with STATUS and print TEXT (a fixed string)
# on stdout or stderr; on failure its first lines follow the FAIL line.
expect_cmd() {
  want=$1 text=$2
  shift 2
  expect_run text 20 "$*" "$want" "$text" "$@"
}

# expect STATUS TEXT ARGS...: the same for $tool ARGS...
expect() {
  want=$1 text=$2
  shift 2
  expect_cmd "$want" "$text" "$tool" "$@"
}
