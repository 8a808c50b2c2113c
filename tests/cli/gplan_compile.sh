#!/bin/sh
# gplan-compile's exit statuses and messages. Usage: gplan_compile.sh TOOL SOURCE_DIR TMP_DIR
set -u
. "$2/tests/cli/lib.sh"
tool_src_tmp "$@"

ex=$src/examples

# 0: success
expect 0 "gpt2: params n_layer=12 " --check "$ex/gpt2.gplan"
expect 0 "148 weights, 497759232 bytes" --check "$ex/gpt2.gplan"
expect 0 "tiny: params n_layer=2 " --check "$ex/tiny.gplan"
expect 0 "; 555 nodes; 201 weights," --check "$ex/llama.gplan"
expect 0 "num_hidden_layers=2 " --check "$ex/llama.gplan" -D num_hidden_layers=2
expect 0 "n_layer=3 " --check "$ex/tiny.gplan" -Dn_layer=3
expect 0 "graph tiny" --emit-ir "$ex/tiny.gplan"
expect 0 "= matmul(" --emit-ir "$ex/tiny.gplan"
expect 0 "usage: gplan-compile" --help
expect 0 "gplan-compile " --version

printf '{"n_layer": 1, "model_type": "gpt2"}\n' > "$tmp/config.json"
expect 0 "tiny: params n_layer=1 " --check "$ex/tiny.gplan" --config "$tmp/config.json"

# --gguf: what llama.cpp assumes where a file is silent (docs/gguf.md), from metadata-only files
. "$src/tests/cli/gguf_lib.sh"
g3() { printf '%s\n' "$tmp/g3_$1.gguf"; }
{ ghead 6; kv_str general.architecture gemma3; kv_u32 gemma3.block_count 4
  kv_u32 gemma3.embedding_length 64; kv_u32 gemma3.attention.head_count 4
  kv_u32 gemma3.attention.key_length 24; kv_u32 gemma3.attention.sliding_window 4; } >"$(g3 plain)"
expect 0 "rope_type=\"default\" factor=8 rope_local_base_freq=10000 query_pre_attn_scalar=24 sliding_window=4 sliding_window_pattern=6 norm_offset=0 " \
  --check "$ex/gemma3.gplan" --gguf "$(g3 plain)"
{ ghead 7; kv_str general.architecture gemma3; kv_u32 gemma3.block_count 4
  kv_u32 gemma3.embedding_length 64; kv_u32 gemma3.attention.head_count 4
  kv_u32 gemma3.attention.key_length 24; kv_u32 gemma3.attention.sliding_window 4
  kv_bools gemma3.attention.sliding_window_pattern 1 1 0 1; } >"$(g3 bools)"
expect 0 " sliding_window_pattern=3 " --check "$ex/gemma3.gplan" --gguf "$(g3 bools)"
{ ghead 7; kv_str general.architecture gemma3; kv_u32 gemma3.block_count 4
  kv_u32 gemma3.embedding_length 2560; kv_u32 gemma3.attention.head_count 8
  kv_u32 gemma3.attention.sliding_window_pattern 2; kv_str gemma3.rope.scaling.type linear
  kv_u32 gemma3.attention.sliding_window 4; } >"$(g3 u32)"
expect 0 "rope_type=\"linear\" " --check "$ex/gemma3.gplan" --gguf "$(g3 u32)"
expect 0 " sliding_window_pattern=2 " --check "$ex/gemma3.gplan" --gguf "$(g3 u32)"
# no window: every layer global; 62 layers (Gemma 3 27B): scores by hidden / heads, not head_dim
{ ghead 5; kv_str general.architecture gemma3; kv_u32 gemma3.block_count 62
  kv_u32 gemma3.embedding_length 5376; kv_u32 gemma3.attention.head_count 32
  kv_u32 gemma3.attention.key_length 128; } >"$(g3 27b)"
expect 0 "query_pre_attn_scalar=168 sliding_window=1024 sliding_window_pattern=1 " \
  --check "$ex/gemma3.gplan" --gguf "$(g3 27b)"
{ ghead 5; kv_str general.architecture gemma2; kv_u32 gemma2.block_count 46
  kv_u32 gemma2.embedding_length 4608; kv_u32 gemma2.attention.head_count 32
  kv_u32 gemma2.attention.key_length 128; } >"$tmp/g2_27b.gguf"
expect 0 "rope_theta=10000 query_pre_attn_scalar=144 attn_logit_softcapping=50 final_logit_softcapping=30 sliding_window=4096 norm_offset=0 " \
  --check "$ex/gemma2.gplan" --gguf "$tmp/g2_27b.gguf"
phi3_shape() { kv_u32 phi3.block_count 32; kv_u32 phi3.embedding_length 3072
  kv_u32 phi3.attention.head_count 32; }
{ ghead 4; kv_str general.architecture phi3; phi3_shape; } >"$tmp/phi3.gguf"
expect 0 " sliding_window=0 " --check "$ex/phi3.gplan" --gguf "$tmp/phi3.gguf"
# LongRoPE's factors (Phi-3 128k): rope_type "longrope", the factors bound (the long ones past the
# original context), its attention factor and original context from the file's keys
{ ghead 7 1; kv_str general.architecture phi3; phi3_shape; kv_u32 phi3.context_length 131072
  kv_u32 phi3.rope.scaling.original_context_length 4096
  kv_f32 phi3.rope.scaling.attn_factor 1067450368; tinfo rope_factors_long.weight 8; } >"$tmp/phi3l.gguf"
tdata "$tmp/phi3l.gguf" 8
expect 0 "rope_factors=1 original_max_position_embeddings=4096 attn_factor=1.25 n_seq=0 kv_block=16 kv_pool=0; tensors 2 input, 2 output, 195 weight" \
  --check "$ex/phi3.gplan" --gguf "$tmp/phi3l.gguf"
# Metadata against its meaning: the shape's keys required, counts positive and dividing, floats
# finite, a context a plan can hold; each refusal names the file and the key.
llama_shape() { kv_str general.architecture llama; kv_u32 llama.block_count 2
  kv_u32 llama.embedding_length 64; }
bad_meta() { # bad_meta NAME MESSAGE: compile --check on $tmp/NAME.gguf, exit 1 and the message
  expect 1 "$tmp/$1.gguf: bad GGUF file ($2)" --check "$ex/llama.gplan" --gguf "$tmp/$1.gguf"
}
{ ghead 3; kv_str general.architecture llama; kv_u32 llama.embedding_length 64
  kv_u32 llama.attention.head_count 4; } >"$tmp/nolayers.gguf"
bad_meta nolayers "no llama.block_count: the model's shape cannot come from the graph's defaults"
{ ghead 3; llama_shape; } >"$tmp/noheads.gguf"
bad_meta noheads "no llama.attention.head_count: the model's shape cannot come from the graph's defaults"
{ ghead 4; llama_shape; kv_u32 llama.attention.head_count 0; } >"$tmp/heads0.gguf"
bad_meta heads0 "llama.attention.head_count = 0: must be positive"
{ ghead 4; llama_shape; kv_u32 llama.attention.head_count 6; } >"$tmp/heads6.gguf"
bad_meta heads6 "llama.attention.head_count = 6: does not divide llama.embedding_length = 64"
{ ghead 5; llama_shape; kv_u32 llama.attention.head_count 4
  kv_u32 llama.attention.head_count_kv 3; } >"$tmp/kv3.gguf"
bad_meta kv3 "llama.attention.head_count_kv = 3: does not divide llama.attention.head_count = 4"
{ ghead 5; llama_shape; kv_u32 llama.attention.head_count 4
  kv_f32 llama.attention.layer_norm_rms_epsilon 2143289344; } >"$tmp/epsnan.gguf"
bad_meta epsnan "llama.attention.layer_norm_rms_epsilon = nan: not a finite number"
{ ghead 5; llama_shape; kv_u32 llama.attention.head_count 4
  kv_u64 llama.context_length 1099511627776; } >"$tmp/ctx40.gguf"
bad_meta ctx40 "llama.context_length = 1099511627776: more than a plan can hold (2^24)"
# head_count_kv absent is head_count (the format's default), not the graph's 4
{ ghead 4; llama_shape; kv_u32 llama.attention.head_count 8; } >"$tmp/kvdefault.gguf"
expect 0 " num_key_value_heads=8 " --check "$ex/llama.gplan" --gguf "$tmp/kvdefault.gguf"
# a safetensors checkpoint's LongRoPE (its factors in config.json) stays refused
expect 1 "rope: scaling \"longrope\" needs its per-frequency factors as freq_factors" \
  --check "$ex/phi3.gplan" -D rope_type=longrope

# 1: bad input
printf 'graph g() {\n  let x = nope;\n}\n' > "$tmp/bad.gplan"
expect 1 "$tmp/bad.gplan:2:11: error: undefined name 'nope'" --check "$tmp/bad.gplan"
expect 1 "$tmp/missing.gplan: error: cannot open: " --check "$tmp/missing.gplan"
expect 1 "error: -D n_layer=x: expected an integer" --check "$ex/tiny.gplan" -D n_layer=x
expect 1 "error: -D frob: graph 'tiny' has no parameter 'frob'" --check "$ex/tiny.gplan" -D frob=1
printf '{"n_layer": "two"}\n' > "$tmp/badconfig.json"
expect 1 "$tmp/badconfig.json:1:2: error: config key 'n_layer': expected an integer" \
  --check "$ex/tiny.gplan" --config "$tmp/badconfig.json"

# Inputs that are no regular file are refused before they are opened (a FIFO would block the
# open; timeout turns a hang into exit status 124).
rm -f "$tmp/fifo" && mkfifo "$tmp/fifo" || fail "mkfifo"
fifo_msg="gplan-compile: $tmp/fifo: cannot open (not a regular file: a FIFO)"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" "$tmp/fifo" -o "$tmp/fifo.plan"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" --check "$ex/llama.gplan" --config "$tmp/fifo"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" --buffers "$tmp/fifo" -o "$tmp/fifo.csv"
expect_cmd 1 "gplan-compile: $ex: cannot open (not a regular file: a folder)" \
  timeout 10 "$tool" --check "$ex"

# 2: bad usage
expect 2 "unknown option '--frob'" --check "$ex/tiny.gplan" --frob
expect 2 "-o FILE is required to plan" "$ex/tiny.gplan"
expect 2 "unexpected argument 'extra'" --check "$ex/tiny.gplan" extra
expect 2 "no input given"
expect 2 "unknown strategy 'best'" "$ex/tiny.gplan" -o "$tmp/x.plan" --strategy best
expect 2 "--alignment needs a power of two" "$ex/tiny.gplan" -o "$tmp/x.plan" --alignment 300
expect 2 "--time-limit needs a positive number" "$ex/tiny.gplan" -o "$tmp/x.plan" --time-limit 0
expect 2 "--capacity applies to --buffers only" "$ex/tiny.gplan" -o "$tmp/x.plan" --capacity 5
expect 2 "--check needs a FILE" --check
expect 2 "malformed -D 'n_layer'" --check "$ex/tiny.gplan" -D n_layer
expect 2 "-D needs NAME=VALUE" --check "$ex/tiny.gplan" -D
expect 2 "--config needs a FILE" --check "$ex/tiny.gplan" --config
expect 2 "more than one mode" --check "$ex/tiny.gplan" --emit-ir "$ex/tiny.gplan"

# Planning: a plan file and its summary.
expect 0 "ratio 1.000" "$ex/tiny.gplan" -o "$tmp/tiny.plan"
[ -s "$tmp/tiny.plan" ] || { echo "FAIL: no plan file written"; failed=1; }
expect 2 "unknown backend 'gpu'" "$ex/tiny.gplan" -o "$tmp/x.plan" --backend gpu
expect 0 "ratio 1.000" "$ex/tiny.gplan" -o "$tmp/tiny-cpu.plan" --backend cpu
[ "$(wc -c <"$tmp/tiny-cpu.plan")" -lt "$(wc -c <"$tmp/tiny.plan")" ] ||
  { echo "FAIL: a CPU-only plan should hold fewer workspaces"; failed=1; }
expect 0 "alignment 4096 B" "$ex/tiny.gplan" -o "$tmp/tiny4k.plan" --alignment 4096 --strategy greedy
expect 1 "$tmp/bad.gplan:2:11: error: undefined name 'nope'" "$tmp/bad.gplan" -o "$tmp/bad.plan"
[ -e "$tmp/bad.plan" ] && { echo "FAIL: a plan was written for a bad graph"; failed=1; }

# The bare offset problem: MiniMalloc's small example has a known optimum of 12.
printf 'id,lower,upper,size
b1,0,3,4
b2,3,9,4
b3,0,9,4
b4,9,21,4
b5,0,21,4
' > "$tmp/p12.csv"
expect 0 "peak 12 " --buffers "$tmp/p12.csv" --capacity 12 -o "$tmp/s12.csv"
head -1 "$tmp/s12.csv" | grep -qx 'id,lower,upper,size,offset' ||
  { echo "FAIL: solution header"; failed=1; }
expect 3 "" --buffers "$tmp/p12.csv" --capacity 11 -o "$tmp/s11.csv" --time-limit 1
printf 'id,lower,upper,size
b1,5,3,4
' > "$tmp/pbad.csv"
expect 1 "$tmp/pbad.csv:2:4: error: empty lifespan: lower 5 >= upper 3" --buffers "$tmp/pbad.csv" -o "$tmp/sbad.csv"

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "gplan-compile: all exit-status tests passed"
