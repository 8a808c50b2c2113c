# shellcheck shell=sh disable=SC2034,SC2154  # failed is read and tool set by the sourcing script
# Helpers shared by the command-line tests (sourced after setting $tool, the program under test).
failed=0

fail() { echo "FAIL: $*"; failed=1; }

# expect_cmd STATUS TEXT COMMAND...: COMMAND must exit with STATUS and print TEXT (a fixed string)
# on stdout or stderr; on failure its first lines follow the FAIL line.
expect_cmd() {
  want=$1 text=$2
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$*: exit status $rc, expected $want"
    printf '%s\n' "$out" | head -20
  elif ! printf '%s\n' "$out" | grep -qF -- "$text"; then
    fail "$*: output lacks: $text"
    printf '%s\n' "$out" | head -20
  fi
}

# expect STATUS TEXT ARGS...: the same for $tool ARGS...
expect() {
  want=$1 text=$2
  shift 2
  expect_cmd "$want" "$text" "$tool" "$@"
}
