#!/bin/sh
# The catalogue of bad input, docs/errors.md, case by case: each case runs a tool on one kind of bad
# input and checks its exit status and one exact line of its output; every case's id and message
# must also be in docs/errors.md (numbers may differ there), and every id there must be a case here.
# Usage: errors.sh GPLAN_COMPILE GPLAN_INSPECT GPLAN_RUN SOURCE_DIR TMP_DIR (GPLAN_RUN may be "")
set -u
compile=$1
inspect=$2
run=$3
src=$4
tmp=$5
doc=$src/docs/errors.md
mkdir -p "$tmp"
cd "$tmp" || exit 1
. "$src/tests/cli/lib.sh"  # failed, fail, expect_run
ran=0
ids=""

# Digits become N, so a message checks against the catalogue whatever sizes or offsets it names.
shape() { printf '%s\n' "$1" | sed 's/[0-9][0-9]*/N/g'; }

# check ID STATUS LINE TOOL ARGS...: TOOL (compile, inspect or run) with ARGS exits with STATUS and
# prints LINE (a whole line, exactly) on stdout or stderr; the catalogue lists ID and LINE.
check() {
  id=$1
  want=$2
  line=$3
  tool=$4
  shift 4
  ids="$ids $id"
  case $tool in
    compile) exe=$compile ;;
    inspect) exe=$inspect ;;
    run) exe=$run ;;
  esac
  expect_run line 5 "$id: gplan-$tool $*" "$want" "$line" "$exe" "$@"
  ran=$((ran + 1))
  grep -qF -- "\`$id\`" "$doc" || fail "$id is not in docs/errors.md"
  shape "$(cat "$doc")" | grep -qF -- "$(shape "$line")" ||
    fail "$id: docs/errors.md lacks the message: $line"
}

# skip ID WHY: a case this build or machine cannot run; it must still be catalogued.
skip() {
  ids="$ids $1"
  echo "skip $1: $2"
  grep -qF -- "\`$1\`" "$doc" || fail "$1 is not in docs/errors.md"
}

# st FILE JSON DATA_BYTES: a safetensors file (u64 little-endian header length, header, zero data).
st() {
  n=$(printf '%s' "$2" | wc -c)
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o\\000\\000\\000\\000' $((n % 256)) $((n / 256 % 256)) \
    $((n / 65536 % 256)) $((n / 16777216 % 256)))" >"$1"
  printf '%s' "$2" >>"$1"
  head -c "$3" /dev/zero >>"$1"
}

# poke FILE OFFSET OCTAL: overwrites one byte.
poke() { printf "\\$3" | dd of="$1" bs=1 seek="$2" count=1 conv=notrunc 2>/dev/null; }

ex=$src/examples

# ---- gplan-compile: the graph language (exit 1) ----
printf 'graph g() { let x = 1 $; }\n' >lex.gplan
check E101 1 "lex.gplan:1:23: error: unexpected character '\$'" compile --check lex.gplan
printf 'graph g() { let x = 1; \000 }\n' >nul.gplan
check E102 1 "nul.gplan:1:24: error: NUL byte (is this a binary file?)" compile --check nul.gplan
printf 'graph g() {\n  let x = 1\n  let y = 2;\n}\n' >syntax.gplan
check E103 1 "syntax.gplan:3:3: error: syntax error, unexpected 'let'" compile --check syntax.gplan
printf 'graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + b; }\n' >name.gplan
check E104 1 "name.gplan:1:62: error: undefined name 'b'" compile --check name.gplan
printf 'graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = a + 1; }\n' >type.gplan
check E105 1 "type.gplan:1:60: error: operator '+' cannot combine a tensor and an integer" compile --check type.gplan
printf 'graph g() { input a: f32[2, 3]; input b: f32[4]; let c = a + b; }\n' >shape.gplan
check E106 1 "shape.gplan:1:60: error: add: shapes [2, 3] and [4] do not broadcast" compile --check shape.gplan
printf 'graph g() { input a: f32[2, 3]; output o: f32[2, 3]; o = frob(a); }\n' >op.gplan
check E107 1 "op.gplan:1:58: error: unknown op 'frob'" compile --check op.gplan
printf 'graph g() { for i in 0..1000000 { } }\n' >loop.gplan
check E108 1 "loop.gplan:1:13: error: too many loop iterations (more than 100000 in all)" compile --check loop.gplan
printf 'graph g() { input a: f32[1099511627776, 1099511627776, 4]; output o: f32[2]; o = cont(slice(a, 0, 0, 2)); }\n' >big.gplan
check E109 1 "big.gplan:1:19: error: tensor 'a': shape [1099511627776, 1099511627776, 4] is too large (more than 2^62 bytes)" compile big.gplan -o big.plan
check E110 1 "missing.gplan: error: cannot open: No such file or directory" compile --check missing.gplan
check E111 1 "error: -D n_layer=x: expected an integer" compile --check "$ex/tiny.gplan" -D n_layer=x
check E112 1 "error: -D frob: graph 'tiny' has no parameter 'frob'" compile --check "$ex/tiny.gplan" -D frob=1
printf '{"n_layer": "two"}\n' >badconfig.json
check E113 1 'badconfig.json:1:2: error: config key '"'n_layer'"': expected an integer, got the string "two"' compile --check "$ex/tiny.gplan" --config badconfig.json
printf 'graph g() { weight w: f32[4, 6] = "w" split(1, groups=4); }\n' >split.gplan
check E114 1 "split.gplan:1:39: error: split: dim 1 of 'w' (6) is not 4 groups of whole units of 1" compile --check split.gplan
cp "$ex/llama.gplan" llama.gplan
check E115 1 "llama.gplan:30:15: error: exact_div: 32 is not a multiple of 3" compile --check llama.gplan --devices 3
printf 'graph g() { weight w: q4_0[4, 30]; }\n' >qrow.gplan
check E116 1 "qrow.gplan:1:20: error: tensor 'w': q4_0 packs rows in blocks of 32: the last dim of [4, 30] must be a multiple of 32" compile --check qrow.gplan
printf 'graph g() { weight w: q8_0[2, 32]; input x: f32[2, 32]; output y: f32[2, 32]; y = x + w; }\n' >qread.gplan
check E117 1 "qread.gplan:1:85: error: add: b ('w') is q8_0: quantized weights are read only by get_rows (the table), matmul (a 2-dim b with tb=1) and moe (the router and experts)" compile --check qread.gplan
printf 'GGUF' >notgguf.gguf
check E118 1 "notgguf.gguf: bad GGUF file (version at offset 4 needs 4 bytes, the file has 0 left)" compile --check llama.gplan --gguf notgguf.gguf
. "$src/tests/cli/gguf_lib.sh"  # metadata-only GGUF files
{ ghead 1; kv_str general.architecture mamba; } >mamba.gguf
check E119 1 'mamba.gguf: architecture "mamba" is not supported by --gguf (llama, qwen2, qwen3, qwen3moe, gpt2, gemma2, gemma3, phi3, gpt-oss)' compile --check llama.gplan --gguf mamba.gguf
# local, global, local, local: no one period
{ ghead 6; kv_str general.architecture gemma3; kv_u32 gemma3.block_count 4
  kv_u32 gemma3.embedding_length 2560; kv_u32 gemma3.attention.head_count 8
  kv_u32 gemma3.attention.sliding_window 4
  kv_bools gemma3.attention.sliding_window_pattern 1 0 1 1; } >swpat.gguf
check E120 1 "swpat.gguf: metadata gemma3.attention.sliding_window_pattern: layer 3 breaks the pattern of one global layer every 2 (sliding_window_pattern)" compile --check "$ex/gemma3.gplan" --gguf swpat.gguf
{ ghead 5; kv_str general.architecture phi3; kv_u32 phi3.block_count 2
  kv_u32 phi3.embedding_length 64
  kv_u32 phi3.attention.head_count 4; kv_u32 phi3.rope.dimension_count 12; } >partial.gguf
check E121 1 "partial.gguf: phi3.rope.dimension_count is 12, not the head size 16: partial rotary embeddings (Phi-4-mini) are not supported" compile --check "$ex/phi3.gplan" --gguf partial.gguf

# ---- gplan-compile: flags (exit 2) and output files ----
check E201 2 "gplan-compile: unknown option '--frob'" compile --check "$ex/tiny.gplan" --frob
check E202 2 "gplan-compile: no input given (FILE -o PLAN, --check FILE, --emit-ir FILE or --buffers CSV)" compile
check E203 2 "gplan-compile: -o FILE is required to plan" compile "$ex/tiny.gplan"
check E204 2 "gplan-compile: unknown strategy 'best' (auto, greedy or exact)" compile "$ex/tiny.gplan" -o x.plan --strategy best
check E205 2 "gplan-compile: --alignment needs a power of two up to 1048576" compile "$ex/tiny.gplan" -o x.plan --alignment 300
check E206 2 "gplan-compile: --devices needs a device count from 1 to 64" compile "$ex/tiny.gplan" -o x.plan --devices 0
check E207 2 "gplan-compile: --time-limit needs a positive number of seconds" compile "$ex/tiny.gplan" -o x.plan --time-limit 0
check E208 2 "gplan-compile: more than one mode given (at '--emit-ir')" compile --check "$ex/tiny.gplan" --emit-ir "$ex/tiny.gplan"
check E209 2 "gplan-compile: malformed -D 'n_layer' (expected NAME=VALUE)" compile --check "$ex/tiny.gplan" -D n_layer
check E210 1 "gplan-compile: /nonexistent/x.plan.tmp: cannot create: No such file or directory" compile "$ex/tiny.gplan" -o /nonexistent/x.plan

# ---- gplan-compile --buffers: the CSV problem ----
printf 'id,lower,upper\nb,0,1\n' >nosize.csv
check E221 1 "nosize.csv:1:15: error: the header has no 'size' column" compile --buffers nosize.csv -o s.csv
printf 'id,lower,upper,size\nb,5,3,4\n' >span.csv
check E222 1 "span.csv:2:3: error: empty lifespan: lower 5 >= upper 3" compile --buffers span.csv -o s.csv
printf 'id,lower,upper,size\nb,0,1,4\nb,1,2,4\n' >dup.csv
check E223 1 "dup.csv:3:1: error: duplicate id 'b', first on line 2" compile --buffers dup.csv -o s.csv
check E224 1 "missing.csv: cannot read (No such file or directory)" compile --buffers missing.csv -o s.csv
printf 'id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n' >p12.csv
check E225 3 "p12.csv: no placement within capacity 11 found in the time limit" compile --buffers p12.csv -o s.csv --capacity 11 --time-limit 1

# ---- plan files: gplan-inspect and gplan-run share the loader (exit 1) ----
printf 'graph g(n = 8) {\n  dim T <= n;\n  input a: f32[T, 4];\n  output o: f32[T, 4];\n  o = a * 2.0;\n}\n' >small.gplan
"$compile" small.gplan -o small.plan >/dev/null 2>&1 || fail "gplan-compile small.gplan"
size=$(wc -c <small.plan)
cp small.plan v2.plan && poke v2.plan 10 002
check E301 1 "gplan-inspect: v2.plan: bad plan file (unsupported major version 2 (this loader reads 1.x))" inspect v2.plan
cp small.plan magic.plan && poke magic.plan 0 130
check E302 1 "gplan-inspect: magic.plan: bad plan file (bad magic: not a gplan plan file)" inspect magic.plan
tr '\r' '\n' <small.plan >text.plan
check E303 1 "gplan-inspect: text.plan: bad plan file (line-ending tripwire damaged: file was transferred as text?)" inspect text.plan
head -c 100 small.plan >trunc.plan
check E304 1 "gplan-inspect: trunc.plan: bad plan file (file size field says $size bytes, the file has 100 (truncated?))" inspect trunc.plan
cat small.plan small.plan >long.plan
check E308 1 "gplan-inspect: long.plan: bad plan file (file size field says $size bytes, the file has $((2 * size)) (data appended?))" inspect long.plan
cp small.plan crc.plan && poke crc.plan $((size - 1)) 376
check E305 1 "gplan-inspect: crc.plan: bad plan file (checksum mismatch in section nodes)" inspect crc.plan
check E306 1 "gplan-inspect: missing.plan: cannot open: No such file or directory" inspect missing.plan
check E307 2 "gplan-inspect: unknown option: --frob" inspect --frob small.plan

if [ -n "$run" ]; then
  "$compile" "$ex/tiny.gplan" -o tiny.plan >/dev/null 2>&1 || fail "gplan-compile tiny.gplan"
  check E311 1 "gplan-run: v2.plan: bad plan file (unsupported major version 2 (this loader reads 1.x))" run v2.plan --random-weights 1
  check E312 1 "gplan-run: crc.plan: bad plan file (checksum mismatch in section nodes)" run crc.plan --random-weights 1
  check E313 1 "gplan-run: small.plan: not a language model (needs a token-id input read by get_rows, a positions input and a logits output)" run small.plan --random-weights 1

  # ---- gplan-run: flags (exit 2) ----
  check E401 2 "gplan-run: no model or plan given" run
  check E402 2 "gplan-run: give exactly one of --weights and --random-weights" run tiny.plan
  check E403 2 "gplan-run: unknown option: --frob" run tiny.plan --random-weights 1 --frob
  check E404 2 "gplan-run: missing value for: --weights" run tiny.plan --weights
  check E405 2 "gplan-run: bad --random-weights seed: x" run tiny.plan --random-weights x
  check E406 2 "gplan-run: --threads needs 1..256: 0" run tiny.plan --random-weights 1 --threads 0
  check E407 2 "gplan-run: bad --prompt-ids (comma-separated integers): 1,,2" run tiny.plan --random-weights 1 --prompt-ids 1,,2
  check E408 2 "gplan-run: bad --temp (a number >= 0): -1" run tiny.plan --random-weights 1 --temp -1
  check E409 2 "gplan-run: unexpected argument: extra" run tiny.plan --random-weights 1 extra

  # ---- gplan-run: weights (exit 1) ----
  check E501 1 "gplan-run: missing.safetensors: cannot open (no such file or folder)" run tiny.plan --weights missing.safetensors
  st narrow.safetensors '{"transformer.wte.weight":{"dtype":"F32","shape":[256,32],"data_offsets":[0,32768]}}' 32768
  check E502 1 "gplan-run: narrow.safetensors: 28 problems with the weights the plan declares:" run tiny.plan --weights narrow.safetensors
  check E503 1 'weights: missing tensor "transformer.wpe.weight"' run tiny.plan --weights narrow.safetensors
  check E504 1 'weights: "transformer.wte.weight": expected shape [256, 64] f32, file has [256, 32] f32' run tiny.plan --weights narrow.safetensors
  st ints.safetensors '{"transformer.wte.weight":{"dtype":"I32","shape":[256,64],"data_offsets":[0,65536]}}' 65536
  check E505 1 'weights: "transformer.wte.weight": expected shape [256, 64] f32, file has [256, 64] i32' run tiny.plan --weights ints.safetensors
  check E506 1 "weights: ... and 12 more problems" run tiny.plan --weights narrow.safetensors
  st transposed.safetensors '{"transformer.wte.weight":{"dtype":"F32","shape":[64,256],"data_offsets":[0,65536]}}' 65536
  check E511 1 "weights: \"transformer.wte.weight\": expected shape [256, 64] f32, file has [64, 256] f32, the transpose (a plan compiled for another layout: for a GGUF file's, compile with --gguf FILE)" run tiny.plan --weights transposed.safetensors
  st short.safetensors '{"transformer.wte.weight":{"dtype":"F32","shape":[256,64],"data_offsets":[0,65536]}}' 100
  check E507 1 'gplan-run: short.safetensors: bad safetensors file (tensor "transformer.wte.weight": data_offsets [0, 65536] out of range: data area is 100 bytes)' run tiny.plan --weights short.safetensors
  printf 'garbage' >tiny.safetensors
  check E508 1 "gplan-run: tiny.safetensors: bad safetensors file (file of 7 bytes is too short for the 8-byte header length)" run tiny.plan --weights tiny.safetensors
  printf '{"weight_map":{"a":"../x.safetensors"}}' >bad.index.json
  check E509 1 'gplan-run: bad.index.json: bad safetensors index ("a" maps to ../x.safetensors, not a plain shard file name)' run tiny.plan --weights bad.index.json
  mkdir -p empty
  check E510 1 "gplan-run: empty: no model.safetensors or model.safetensors.index.json in this folder" run tiny.plan --weights empty

  # ---- gplan-run: token ids and lengths (exit 1) ----
  check E601 1 "gplan-run: prompt token 1 is 300, outside the vocabulary [0, 256)" run tiny.plan --random-weights 1 --prompt-ids 1,300
  check E602 1 "gplan-run: prompt token 0 is -1, outside the vocabulary [0, 256)" run tiny.plan --random-weights 1 --prompt-ids -1
  long=$(seq -s, 1 70)
  check E603 1 "gplan-run: the prompt has 70 tokens, more than the planned context of 64 positions" run tiny.plan --random-weights 1 --prompt-ids "$long"
  check E604 0 "gplan-run: reached the planned context (64 positions); stopping (--loop starts again at position 0)" run tiny.plan --random-weights 1 --prompt-ids 1 -n 100

  # ---- gplan-run: backends (exit 1) ----
  if "$run" tiny.plan --random-weights 1 --backend frob 2>&1 | grep -q ', cuda)'; then
    check E701 1 'gplan-run: unknown backend "frob" (cpu, reference, cuda)' run tiny.plan --random-weights 1 --backend frob
    skip E702 "this build has the CUDA backend"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
      skip E703 "this machine has a GPU"
    else
      check E703 1 "gplan-run: cuda: no CUDA device" run tiny.plan --random-weights 1 --backend cuda -n 1
    fi
  else
    check E701 1 'gplan-run: unknown backend "frob" (cpu, reference)' run tiny.plan --random-weights 1 --backend frob
    check E702 1 "gplan-run: backend cuda: this build has no CUDA support (configure with -DGPLAN_CUDA=ON on a machine with nvcc)" run tiny.plan --random-weights 1 --backend cuda
    skip E703 "this build has no CUDA backend"
  fi

  # ---- gplan-run: LoRA adapters ----
  cp -r "$src/tests/cli/lora_adapter" adapter
  tdims="-D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab_size=256 -D n_positions=64 -D n_batch=64"
  for m in "merge8:-D lora_r=8" "merge16:-D lora_r=4 -D wtype=f16"; do
    # shellcheck disable=SC2086
    "$compile" "$ex/gpt2.gplan" $tdims ${m#*:} --lora-merge -o "${m%%:*}.plan" >/dev/null 2>&1 ||
      fail "gplan-compile --lora-merge ${m#*:}"
  done
  mkdir -p badshape
  printf '{"r": 4, "lora_alpha": 8, "target_modules": ["c_attn"], "fan_in_fan_out": true}' \
    >badshape/adapter_config.json
  st badshape/adapter_model.safetensors '{"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight":{"dtype":"F32","shape":[4,32],"data_offsets":[0,512]},"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight":{"dtype":"F32","shape":[192,4],"data_offsets":[512,3584]}}' 3584
  check E901 2 "gplan-run: --lora in merge mode needs --lora-merge-plan FILE (gplan-compile MODEL -D lora_r=R --lora-merge -o FILE)" run tiny.plan --random-weights 1 --lora adapter
  check E902 1 "gplan-run: lora: adapter: the adapter has rank 4, the merge plan merge8.plan rank 8 (compile it with -D lora_r=4)" run tiny.plan --random-weights 1 --lora adapter --lora-merge-plan merge8.plan
  check E903 1 'gplan-run: tiny.plan: not a LoRA merge plan (no input "lora_scale" f32 [1]; make one with gplan-compile MODEL.gplan -D lora_r=R --lora-merge -o FILE)' run tiny.plan --random-weights 1 --lora adapter --lora-merge-plan tiny.plan
  check E904 1 'gplan-run: lora: merge plan merge16.plan: "transformer.h.0.attn.c_attn.weight" is f16 [64, 192], but the model'"'"'s plan "tiny" has it as f32 [64, 192] (compile both from the same graph and parameters)' run tiny.plan --random-weights 1 --lora adapter --lora-merge-plan merge16.plan
  check E905 1 'gplan-run: lora: "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": expected shape [4, 64], file has [4, 32] (target "transformer.h.0.attn.c_attn.weight" [64, 192], Conv1D [in, out])' run tiny.plan --random-weights 1 --lora badshape --lora-merge-plan merge16.plan
  "$compile" "$ex/gpt2.gplan" -D n_layer=1 -D n_embd=64 -D n_head=4 -D vocab_size=256 \
    -D n_positions=64 -D n_batch=8 -D n_rows=1 -o rows1.plan >/dev/null 2>&1 || fail "gplan-compile rows1.plan"
  check E802 1 "gplan-run: set_rows: 3 rows asked for, the plan computes at most 1 (R <= 1; compile with a larger bound, e.g. gplan-compile -D n_rows=N)" run rows1.plan --random-weights 1 --prompt-ids 1,2,3 -n 1 --logits-out rows1.bin --logits-all
else
  for id in E311 E312 E313 E401 E402 E403 E404 E405 E406 E407 E408 E409 E501 E502 E503 E504 E505 \
    E506 E507 E508 E509 E510 E601 E602 E603 E604 E701 E702 E703 E802 E901 E902 E903 E904 \
    E905; do
    skip $id "gplan-run is not built"
  done
fi

# ---- gplan-compile --lora-merge ----
# shellcheck disable=SC2086
check E906 1 "error: graph 'gpt2' declares no LoRA weights (base_model.model.<module>.lora_A.weight): compile it with -D lora_r=R to build its merge graph" compile "$ex/gpt2.gplan" -D n_layer=1 --lora-merge -o nolora.plan
check E907 2 "gplan-compile: --lora-merge makes a CPU plan of one device (no --buffers, --devices or --backend other than cpu)" compile "$ex/gpt2.gplan" -D lora_r=4 --lora-merge --devices 2 -o x.plan

# ---- stacked expert weights: asserted in tests/test_moe.c ----
for e in "E512 is one tensor or 8, '*' standing for the index)" \
         'E513 up_proj.weight"): expected shape [32, 64] f32, file has [32, 48] f32' \
         "E514 that are not adjacent in the file; gplan maps a GGUF file's experts in place only: convert the model again with a current llama.cpp, which merges them (ffn_*_exps)"; do
  id=${e%% *} m=${e#* }
  ids="$ids $id"
  sed 's/\\"/"/g' "$src/tests/test_moe.c" | grep -qF -- "$m" ||
    fail "$id: tests/test_moe.c no longer asserts: $m"
  grep -qF -- "$m" "$doc" || fail "$id: docs/errors.md lacks: $m"
done

# ---- the embedding API (include/gplan/gplan.h): asserted exactly in tests/test_runtime.c ----
for m in "T = 65 is outside [1, 64] (the plan's bound)"; do
  ids="$ids E801"
  grep -qF -- "$m" "$src/tests/test_runtime.c" || fail "E801: tests/test_runtime.c no longer asserts: $m"
  grep -qF -- "$m" "$doc" || fail "E801: docs/errors.md lacks: $m"
done
for m in "eval: rows: the rows asked for must be tokens of this eval: node "; do
  ids="$ids E803"
  grep -qF -- "$m" "$src/tests/test_runtime.c" || fail "E803: tests/test_runtime.c no longer asserts: $m"
  grep -qF -- "$m" "$doc" || fail "E803: docs/errors.md lacks: $m"
done

# Every catalogued id is a case here, and the reverse (checked above).
for id in $(grep -o '`E[0-9][0-9][0-9]`' "$doc" | tr -d '`' | sort -u); do
  case " $ids " in
    *" $id "*) ;;
    *) fail "docs/errors.md lists $id, which errors.sh does not check" ;;
  esac
done

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "errors: $ran cases passed"
