#!/bin/sh
# gplan-tokenize: exact ids and text through the committed tokenizer.json folders (gpt-2,
# llama-spm) and a GGUF vocabulary (fuzz/corpus/tokenizer), stdin and --file, special tokens, and
# its refusals (invalid UTF-8, bad ids, bad models, bad usage). Usage: gplan_tokenize.sh TOOL
# SOURCE_DIR TMP_DIR
set -u
. "$2/tests/cli/lib.sh"
tool_src_tmp "$@"

gpt2=$src/tests/tokenizer/json/gpt-2
spm=$src/tests/tokenizer/json/llama-spm
tiny=$src/fuzz/corpus/tokenizer/vocab-bpe.gguf

# expect_out WANT ARGS...: gplan-tokenize ARGS... must exit 0 and print exactly WANT
expect_out() {
  want=$1
  shift
  got=$("$tool" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] || fail "$*: exit status $rc: $got"
  [ "$got" = "$want" ] || fail "$*: printed '$got', expected '$want'"
}

expect_out "15496,995" "$gpt2" "Hello world"
expect_out "15496,995" "$gpt2/tokenizer.json" "Hello world"
expect_out "1,15043,3186" "$spm" "Hello world"
expect_out "15043,3186" "$spm" --no-special "Hello world"
expect_out "Hello world" "$spm" --decode 1,15043,3186
expect_out "<s> Hello world" "$spm" --decode 1,15043,3186 --parse-special
expect_out "2" "$gpt2" --count "Hello world"
# the gpt-2 vocabulary's <|endoftext|> is a control token: an id only with --parse-special
expect_out "50256" "$gpt2" --parse-special "<|endoftext|>"
expect_out "27,91,437,1659,5239,91,29" "$gpt2" "<|endoftext|>"
printf 'Hello world' | expect_out "15496,995" "$gpt2"
printf 'Hello world\n' >"$tmp/hello.txt"
expect_out "15496,995,198" "$gpt2" --file "$tmp/hello.txt"
# the built-in GGUF vocabulary of the tests: "Hello the world" is three merged tokens
expect_out "278,258,274" "$tiny" "Hello the world"
expect_out "Hello the world" "$tiny" --decode 278,258,274
# a character split across tokens decodes whole
expect_out "$(printf '\360\237\246\231')" "$gpt2" --decode "$("$tool" "$gpt2" "$(printf '\360\237\246\231')")"

printf 'ab\377cd' >"$tmp/bad.txt"
expect 1 "gplan-tokenize: $tmp/bad.txt: invalid UTF-8 at byte 2" "$gpt2" --file "$tmp/bad.txt"
expect 1 "bad id at '99999999'" "$gpt2" --decode 1,99999999
expect 1 "bad id at 'x'" "$gpt2" --decode 1,x
expect 1 "$tmp/none: cannot open" "$tmp/none"
mkdir -p "$tmp/empty"
expect 1 "$tmp/empty/tokenizer.json: cannot open" "$tmp/empty"
printf '{"model": ' >"$tmp/broken.json"
expect 1 "$tmp/broken.json:1:" "$tmp/broken.json"
head -c 200 "$tiny" >"$tmp/trunc.gguf"
expect 1 "$tmp/trunc.gguf: bad GGUF file (" "$tmp/trunc.gguf"
printf 'GG' >"$tmp/short.gguf"
expect 1 "$tmp/short.gguf: bad GGUF file (" "$tmp/short.gguf"
expect 1 "$tmp/missing.txt: cannot open" "$gpt2" --file "$tmp/missing.txt"
rm -f "$tmp/fifo" && mkfifo "$tmp/fifo" || fail "mkfifo"
expect_cmd 1 "$tmp/fifo: cannot open (not a regular file: a FIFO)" timeout 10 "$tool" "$tmp/fifo" "x"
expect 2 "no MODEL given"
expect 2 "unknown option" --frob "$gpt2"
expect 2 "give one of TEXT" "$gpt2" "x" --decode 1
expect 0 "usage: gplan-tokenize" --help

[ "$failed" -eq 0 ] || exit 1
echo "gplan-tokenize: all tests passed"
