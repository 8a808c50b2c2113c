#!/bin/sh
# gplan-run from text: --prompt and --prompt-file against --prompt-ids of the same tokenization,
# --stop, -n, end-of-generation ids, sampling flags, --chat's cache across turns and its restart
# when the context is full, and the errors. A tiny random-weights GPT-2 (2 layers, 64 wide, at
# most 16 tokens an eval, so prompts and turns take several) with the 384-token byte-level BPE of
# tests/cli/tokenizer/ (made by its make.py). The seeds are ones whose greedy text is valid UTF-8
# (a lone byte token streams as U+FFFD but decodes to the raw byte).
# Usage: gplan_run_text.sh GPLAN_COMPILE GPLAN_RUN GPLAN_TOKENIZE SOURCE_DIR TMP_DIR
set -u
compile=$1
tool=$2
tokenize=$3
src=$4
tmp=$5
mkdir -p "$tmp"
. "$src/tests/cli/lib.sh"
tok=$src/tests/cli/tokenizer

plan=$tmp/text.plan
small=$tmp/text64.plan
small_gpt2="-D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab_size=384 -D n_batch=16"
# shellcheck disable=SC2086  # the -D words split on purpose
"$compile" "$src/examples/gpt2.gplan" $small_gpt2 -D n_positions=256 -o "$plan" > /dev/null ||
  { echo "FAIL: compile"; exit 1; }
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $small_gpt2 -D n_positions=64 -o "$small" > /dev/null ||
  { echo "FAIL: compile"; exit 1; }
"$compile" "$src/examples/tiny.gplan" -o "$tmp/tiny256.plan" > /dev/null ||
  { echo "FAIL: compile"; exit 1; }

ids_of() { "$tokenize" "$tok" "$1"; }                      # the ids of a text, comma-separated
count_of() { "$tokenize" "$tok" --parse-special --no-special --count "$1"; }
text_of() { "$tokenize" "$tok" --decode "$(printf '%s' "$1" | tr ' ' ,)"; }
has() { printf '%s\n' "$1" | grep -qF -- "$2"; }               # has OUTPUT TEXT

# ---- greedy text equals the decoded ids of --prompt-ids with the same tokenization ----
for case in "4|Hello, how are you?" "7|The quick brown fox" "4|Grüße, 世界 🙂 and more"; do
  seed=${case%%|*}
  prompt=${case#*|}
  ids=$(ids_of "$prompt")
  out_ids=$("$tool" "$plan" --random-weights "$seed" --prompt-ids "$ids" -n 24 --ignore-eos)
  want=$(text_of "$out_ids")
  got=$("$tool" "$plan" --random-weights "$seed" --tokenizer "$tok" --prompt "$prompt" -n 24 \
        --ignore-eos)
  [ -n "$want" ] || fail "seed $seed: the ids decode to nothing"
  [ "$got" = "$want" ] || fail "seed $seed: --prompt gave '$got', the ids decode to '$want'"
  printf '%s' "$prompt" > "$tmp/prompt.txt"
  got=$("$tool" "$plan" --random-weights "$seed" --tokenizer "$tok" --prompt-file \
        "$tmp/prompt.txt" -n 24 --ignore-eos)
  [ "$got" = "$want" ] || fail "seed $seed: --prompt-file gave '$got', expected '$want'"
done
expect 1 "the prompt needs a tokenizer: give --tokenizer PATH" "$plan" --random-weights 1 \
  --prompt "Hi"
# The tokenizer found beside the weights: a checkpoint folder (the 384-token GPT-2 of
# tests/parity/gpt2) holding tokenizer.json, given as the folder or as its safetensors file.
mkdir -p "$tmp/ckpt"
cp "$src/tests/parity/gpt2/model.safetensors" "$src/tests/parity/gpt2/config.json" \
  "$tok/tokenizer.json" "$tmp/ckpt/"
"$compile" "$src/examples/gpt2.gplan" --config "$tmp/ckpt/config.json" -o "$tmp/ckpt.plan" \
  > /dev/null || fail "compile the parity GPT-2"
a=$("$tool" "$tmp/ckpt.plan" --weights "$tmp/ckpt" --prompt "Hello, how are you?" -n 12)
b=$("$tool" "$tmp/ckpt.plan" --weights "$tmp/ckpt/model.safetensors" --prompt "Hello, how are you?" \
    -n 12)
c=$("$tool" "$tmp/ckpt.plan" --weights "$src/tests/parity/gpt2" --tokenizer "$tok" \
    --prompt "Hello, how are you?" -n 12)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] ||
  fail "tokenizer beside the weights: folder '$a', file '$b', --tokenizer '$c'"
expect 1 "the prompt needs a tokenizer: give --tokenizer PATH (a .gguf, a tokenizer.json or a folder holding one); none was found beside the weights" \
  "$tmp/ckpt.plan" --weights "$src/tests/parity/gpt2" --prompt "Hi"

# ---- -n bounds the tokens; the last is not evaluated ----
expect 0 "stats: evals 5 (prompt 1, generation 4)" "$plan" --random-weights 1 --tokenizer "$tok" \
  --prompt "Hello" -n 5 --ignore-eos --stats
got=$("$tool" "$plan" --random-weights 1 --tokenizer "$tok" --prompt "Hello" -n 0)
[ -z "$got" ] || fail "-n 0 printed '$got'"
# The prompt in evals of at most the planned 16 tokens: 70 tokens take 5.
long=$(printf 'a b c d e f g h i j k l m n o p q r s t u v w x y z %.0s' 1 2 3)
n_long=$("$tokenize" "$tok" --count "$long")
[ "$n_long" -gt 64 ] || fail "the long prompt has only $n_long tokens"
chunks=$(( (n_long + 15) / 16 ))
expect 0 "stats: prompt     $n_long tokens" "$plan" --random-weights 1 --tokenizer "$tok" \
  --prompt "$long" -n 2 --stats
expect 0 "stats: evals $((chunks + 1)) (prompt $chunks, generation 1)" "$plan" --random-weights 1 \
  --tokenizer "$tok" --prompt "$long" -n 2 --stats

# ---- --stop cuts before the stop string, also when it spans tokens ----
full=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
       --ignore-eos)
stop=$(printf '%s' "$full" | cut -c4-6)  # three characters from the middle
[ ${#stop} -eq 3 ] || fail "no stop string from '$full'"
want=${full%%"$stop"*}
got=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
      --ignore-eos --stop "$stop")
[ "$got" = "$want" ] || fail "--stop '$stop': got '$got', expected '$want' (of '$full')"
got=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
      --ignore-eos --stop "no such text" --stop "$stop")
[ "$got" = "$want" ] || fail "two --stop strings: got '$got', expected '$want'"
got=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
      --ignore-eos --stop "no such text")
[ "$got" = "$full" ] || fail "an absent --stop string changed the text: '$got'"
# Where two tokens meet ("id" then "8"): the text up to the first "d8".
case $full in *d8*) ;; *) fail "no 'd8' in '$full'" ;; esac
got=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
      --ignore-eos --stop "d8")
[ "$got" = "${full%%d8*}" ] || fail "--stop d8: got '$got', expected '${full%%d8*}'"

# ---- end of generation: seed 4 answers "Hello" with "llo", then <|im_end|> (an end id) ----
got=$("$tool" "$plan" --random-weights 4 --tokenizer "$tok" --prompt "Hello" -n 16)
[ "$got" = "llo" ] || fail "end of generation: got '$got', expected 'llo'"
expect 0 "stats: evals 2 (prompt 1, generation 1)" "$plan" --random-weights 4 --tokenizer "$tok" \
  --prompt "Hello" -n 16 --stats
expect 0 "stats: evals 16 (prompt 1, generation 15)" "$plan" --random-weights 4 --tokenizer "$tok" \
  --prompt "Hello" -n 16 --stats --ignore-eos

# ---- --eos ID: generation stops before printing it ----
out_ids=$("$tool" "$plan" --random-weights 7 --prompt-ids "$(ids_of "The quick brown fox")" -n 24)
third=$(echo "$out_ids" | cut -d' ' -f3)
before=$(echo " $out_ids " | sed "s/ $third .*//")
want=$(text_of "${before# }")
got=$("$tool" "$plan" --random-weights 7 --tokenizer "$tok" --prompt "The quick brown fox" -n 24 \
      --eos "$third")
[ "$got" = "$want" ] || fail "--eos $third: got '$got', expected '$want'"

# ---- sampling: seeded draws repeat; top-k 1 is greedy ----
a=$("$tool" "$plan" --random-weights 3 --tokenizer "$tok" --prompt "Hello" -n 16 --temp 0.9 \
    --top-p 0.95 --min-p 0.01 --repeat-penalty 1.3 --repeat-last-n 8 --seed 11 --ignore-eos)
b=$("$tool" "$plan" --random-weights 3 --tokenizer "$tok" --prompt "Hello" -n 16 --temp 0.9 \
    --top-p 0.95 --min-p 0.01 --repeat-penalty 1.3 --repeat-last-n 8 --seed 11 --ignore-eos)
[ "$a" = "$b" ] || fail "seeded sampling differs: '$a' vs '$b'"
g=$("$tool" "$plan" --random-weights 3 --tokenizer "$tok" --prompt "Hello" -n 16 --ignore-eos)
k1=$("$tool" "$plan" --random-weights 3 --tokenizer "$tok" --prompt "Hello" -n 16 --ignore-eos \
     --temp 1.5 --top-k 1 --seed 4)
[ "$g" = "$k1" ] || fail "--top-k 1 gave '$k1', greedy '$g'"

# ---- no allocation per token (not counted in sanitizer builds) ----
out=$("$tool" "$plan" --random-weights 3 --tokenizer "$tok" --prompt "Hello" -n 40 --temp 0.8 \
      --top-k 20 --repeat-penalty 1.1 --stop "zzz" --ignore-eos --stats 2>&1 >/dev/null)
if ! has "$out" "n/a (sanitizer build)"; then
  has "$out" "during evals: 0 on the eval thread" ||
    fail "allocations during evals: $out"
  printf '%s\n' "$out" | grep -q "outside evals (sampling, decoding, printing): 0$" ||
    fail "allocations while generating: $out"
fi

# ---- chat: the second turn evaluates only its own tokens ----
sys_default="<|im_start|>system
You are a tiny model<|im_end|>
"
turn1="<|im_start|>user
Hello<|im_end|>
<|im_start|>assistant
"
turn2="<|im_end|>
<|im_start|>user
How are you?<|im_end|>
<|im_start|>assistant
"
n1=$(count_of "$sys_default$turn1")
n2=$(count_of "$turn2")
out=$(printf 'Hello\nHow are you?\n' | "$tool" "$plan" --random-weights 4 --tokenizer "$tok" \
      --chat -n 6 --ignore-eos --stats 2>&1 >/dev/null)
has "$out" "stats: turn 1: $n1 tokens evaluated (0 already in the cache), 6 generated" ||
  fail "chat turn 1 (expected $n1 tokens): $out"
has "$out" "stats: turn 2: $n2 tokens evaluated ($((n1 + 6)) already in the cache), 6 generated" ||
  fail "chat turn 2 (expected $n2 new tokens after $((n1 + 6))): $out"
if ! has "$out" "n/a (sanitizer build)"; then
  printf '%s\n' "$out" | grep -q "outside evals (sampling, decoding, printing): 0$" ||
    fail "chat allocations while generating: $out"
fi
# The replies are what one long prompt of the same text gives: greedy, token for token.
replies=$(printf 'Hello\n' | "$tool" "$plan" --random-weights 4 --tokenizer "$tok" --chat -n 6 \
          --ignore-eos 2>/dev/null)
single=$("$tool" "$plan" --random-weights 4 --tokenizer "$tok" --prompt "$sys_default$turn1" -n 6 \
         --ignore-eos)
[ "$replies" = "$single" ] || fail "chat reply '$replies', the same prompt gives '$single'"
# --stop ends a reply (seed 8 answers 5 newlines, then K after K); the next turn still continues
# the cache, which holds the reply up to where it stopped (5 newline tokens and two K).
got=$(printf 'Hello\n' | "$tool" "$plan" --random-weights 8 --tokenizer "$tok" --chat -n 12 \
      --ignore-eos --stop KK 2>/dev/null | tr '\n' '|')
[ "$got" = "||||||" ] || fail "chat --stop KK: got '$got', expected 5 newlines and the reply's end"
out=$(printf 'Hello\nHow are you?\n' | "$tool" "$plan" --random-weights 8 --tokenizer "$tok" \
      --chat -n 12 --ignore-eos --stop KK --stats 2>&1 >/dev/null)
has "$out" "stats: turn 1: $n1 tokens evaluated (0 already in the cache), 7 generated" ||
  fail "chat --stop turn 1: $out"
has "$out" "stats: turn 2: $n2 tokens evaluated ($((n1 + 7)) already in the cache)" ||
  fail "chat --stop turn 2 (expected $n2 after $((n1 + 7))): $out"
# --system replaces the template's default; --chat-format overrides the template.
n1=$(count_of "<|im_start|>system
Be brief.<|im_end|>
$turn1")
out=$(printf 'Hello\n' | "$tool" "$plan" --random-weights 4 --tokenizer "$tok" --chat -n 2 \
      --stats --system "Be brief." 2>&1 >/dev/null)
has "$out" "stats: turn 1: $n1 tokens evaluated" || fail "--system: $out"
n1=$(count_of "<|start_header_id|>user<|end_header_id|>

Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>

")
out=$(printf 'Hello\n' | "$tool" "$plan" --random-weights 4 --tokenizer "$tok" --chat -n 2 \
      --stats --chat-format llama3 2>&1 >/dev/null)
# Llama 3's BOS is this vocabulary's <|endoftext|>: one more token.
has "$out" "stats: turn 1: $((n1 + 1)) tokens evaluated" ||
  fail "--chat-format llama3 (expected $((n1 + 1))): $out"
# A context of 64: the second turn does not fit and the chat starts over with it alone.
n2=$(count_of "${sys_default}<|im_start|>user
Tell me a long story about the fox<|im_end|>
<|im_start|>assistant
")
out=$(printf 'Hello\nTell me a long story about the fox\n' |
      "$tool" "$small" --random-weights 4 --tokenizer "$tok" --chat -n 6 --ignore-eos --stats \
      2>&1 >/dev/null)
has "$out" "gplan-run: the context is full (64 positions): the oldest 2 messages dropped, the cache started over" ||
  fail "chat restart message: $out"
has "$out" "stats: turn 2: $n2 tokens evaluated (0 already in the cache)" ||
  fail "chat restart (expected $n2 tokens from position 0): $out"

# ---- a GGUF vocabulary with its own template: Phi-3's SentencePiece BPE (../shared) ----
phi=$src/../shared/data/vocab/ggml-vocab-phi-3.gguf
if [ -f "$phi" ]; then
  "$compile" "$src/examples/llama.gplan" -D num_hidden_layers=1 -D hidden_size=64 \
    -D intermediate_size=128 -D num_attention_heads=4 -D num_key_value_heads=2 \
    -D vocab_size=32064 -D max_position_embeddings=256 -D n_batch=32 -o "$tmp/phi.plan" \
    > /dev/null || fail "compile the Phi-3-sized plan"
  # Its template writes BOS first (bos_token, <s>): <s><|user|>\nHello<|end|>\n<|assistant|>\n.
  p1=$("$tokenize" "$phi" --parse-special --no-special --count "<s><|user|>
Hello<|end|>
<|assistant|>
")
  p2=$("$tokenize" "$phi" --parse-special --no-special --count "<|end|>
<|user|>
Who are you?<|end|>
<|assistant|>
")
  out=$(printf 'Hello\nWho are you?\n' | "$tool" "$tmp/phi.plan" --random-weights 2 \
        --tokenizer "$phi" --chat -n 6 --ignore-eos --stats 2>&1 >/dev/null)
  has "$out" "stats: turn 1: $p1 tokens evaluated (0 already in the cache), 6 generated" ||
    fail "phi-3 chat turn 1 (expected $p1): $out"
  has "$out" "stats: turn 2: $p2 tokens evaluated ($((p1 + 6)) already in the cache), 6 generated" ||
    fail "phi-3 chat turn 2 (expected $p2 after $((p1 + 6))): $out"
else
  echo "phi-3 chat: skipped (no $phi)"
fi

# ---- errors ----
expect 2 "bad --top-p (a number in (0, 1]): 0" "$plan" --random-weights 1 --top-p 0
expect 2 "bad --top-k (an integer >= 0): -1" "$plan" --random-weights 1 --top-k -1
expect 2 "bad --min-p (a number in [0, 1]): 2" "$plan" --random-weights 1 --min-p 2
expect 2 "bad --repeat-penalty (a number > 0): 0" "$plan" --random-weights 1 --repeat-penalty 0
expect 2 "bad --repeat-last-n (an integer >= 0): x" "$plan" --random-weights 1 --repeat-last-n x
expect 2 "unknown --chat-format: vicuna (formats: chatml, llama3, llama2, gemma, phi3, mistral)" \
  "$plan" --random-weights 1 --chat --chat-format vicuna
expect 2 "give at most one of --prompt-ids, --prompt, --prompt-file and --chat" "$plan" \
  --random-weights 1 --prompt-ids 1 --prompt "Hi"
expect 2 "give at most one of --prompt-ids, --prompt, --prompt-file and --chat" "$plan" \
  --random-weights 1 --prompt "Hi" --chat
expect 2 "--stop and --tokenizer need --prompt, --prompt-file or --chat" "$plan" \
  --random-weights 1 --stop x
expect 2 "--system and --chat-format need --chat" "$plan" --random-weights 1 --prompt "Hi" \
  --tokenizer "$tok" --system x
expect 2 "--stop needs a non-empty string" "$plan" --random-weights 1 --prompt "Hi" --stop ""
expect 1 "gplan-run: --prompt: invalid UTF-8 at byte 2" "$plan" --random-weights 1 \
  --tokenizer "$tok" --prompt "$(printf 'ab\377cd')"
printf 'caf\303' > "$tmp/bad.txt"
expect 1 "gplan-run: $tmp/bad.txt: invalid UTF-8 at byte 3" "$plan" --random-weights 1 \
  --tokenizer "$tok" --prompt-file "$tmp/bad.txt"
expect 1 "gplan-run: $tmp/missing.txt: cannot open" "$plan" --random-weights 1 \
  --tokenizer "$tok" --prompt-file "$tmp/missing.txt"
printf '' > "$tmp/empty.txt"
expect 1 "the prompt is empty (no tokens)" "$plan" --random-weights 1 --tokenizer "$tok" \
  --prompt-file "$tmp/empty.txt"
expect 1 "the tokenizer has 384 tokens, more than the plan's vocabulary of 256" \
  "$tmp/tiny256.plan" --random-weights 1 --tokenizer "$tok" --prompt "Hi"
expect 1 "gplan-run: the prompt has $n_long tokens, more than the planned context of 64 positions" \
  "$small" --random-weights 1 --tokenizer "$tok" --prompt "$long"
out=$(printf 'ok\n\377\n' | "$tool" "$plan" --random-weights 1 --tokenizer "$tok" --chat -n 1 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "chat with an invalid UTF-8 line: exit status $rc, expected 1"
has "$out" "gplan-run: stdin line 2: invalid UTF-8 at byte 0; turn skipped" ||
  fail "chat with an invalid UTF-8 line: $out"
mkdir -p "$tmp/notmpl" "$tmp/othertmpl"
cp "$tok/tokenizer.json" "$tmp/notmpl/"
cp "$tok/tokenizer.json" "$tmp/othertmpl/"
printf '{"chat_template": "{%% for m in messages %%}Human: {{ m.content }}{%% endfor %%}"}\n' \
  > "$tmp/othertmpl/tokenizer_config.json"
expect 1 "the tokenizer has no chat template: choose one with --chat-format NAME" "$plan" \
  --random-weights 1 --tokenizer "$tmp/notmpl" --chat
expect 1 "unknown chat template (none of the markers of chatml, llama3, llama2, gemma, phi3, mistral): choose one with --chat-format NAME" \
  "$plan" --random-weights 1 --tokenizer "$tmp/othertmpl" --chat
out=$(printf 'Hi\n' | "$tool" "$plan" --random-weights 1 --tokenizer "$tmp/othertmpl" --chat \
      --chat-format chatml -n 2 --stats 2>&1)
has "$out" "stats: turn 1:" || fail "--chat-format over an unknown template: $out"

[ $failed -eq 0 ] && echo "gplan-run text: all checks passed"
exit $failed
