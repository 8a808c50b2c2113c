#!/usr/bin/env python3
"""Runs a GGUF file of parity-to-gguf (tests/parity/to_gguf.c) in llama.cpp itself, to check that
llama.cpp reads it as gplan does: the file's metadata and tensors are copied with a vocabulary of
byte tokens added (llama.cpp needs one; the fixtures have none), the fixture's prompt and tokens
are teacher-forced through llama-cpp-python's Llama (f32 KV cache), and each step's logits row is
compared with the fixture's (transformers) logits and, with --gplan, with gplan-run's rows.

usage: check_gguf_llamacpp.py FILE.gguf FIXTURE_DIR WORK_DIR [--gplan LOGITS]
  LOGITS: gplan-run --logits-out of a plan compiled with --gguf FILE -D n_batch=1, run with
  --prompt-ids PROMPT,TOKENS[:-1] -n 1 (one row per position).
Needs numpy, gguf and llama-cpp-python (its source tree on PYTHONPATH and LLAMA_CPP_LIB_PATH naming
a folder with libllama.so will do). llama.cpp runs llama files without a sliding window: compare
a windowed fixture (mistral) with --gplan from a plan with the same full attention."""
import os
import sys

import numpy as np
import gguf


def with_vocab(src, dst):
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if f.types[0] == gguf.GGUFValueType.UINT32:
            w.add_uint32(name, f.contents())
        elif f.types[0] == gguf.GGUFValueType.FLOAT32:
            w.add_float32(name, f.contents())
        else:
            raise SystemExit(f"{src}: {name}: value type {f.types[0]} not copied")
    emb = [t for t in r.tensors if t.name == "token_embd.weight"][0]
    vocab = int(emb.shape[1])
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<0x{i:02X}>" if i < 256 else f"tok{i}" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([6 if i < 256 else 1 for i in range(vocab)])  # 6: byte, 1: normal
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        w.add_tensor(t.name, np.array(t.data).reshape(shape), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def max_rel(a, b):
    return max(float(np.abs(a[s] - b[s]).max() / np.abs(b[s]).max()) for s in range(len(b)))


def main():
    args = sys.argv[1:]
    gplan = None
    if "--gplan" in args:
        i = args.index("--gplan")
        gplan = args[i + 1]
        del args[i:i + 2]
    if len(args) != 3:
        sys.exit(__doc__)
    src, fixture, work = args
    os.makedirs(work, exist_ok=True)
    dst = os.path.join(work, os.path.basename(src).replace(".gguf", ".vocab.gguf"))
    with_vocab(src, dst)

    import llama_cpp
    with open(os.path.join(fixture, "prompt.txt")) as f:
        prompt = [int(x) for x in f.read().strip().split(",")]
    with open(os.path.join(fixture, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()]
    llm = llama_cpp.Llama(model_path=dst, n_ctx=64, logits_all=True, verbose=False, n_threads=2,
                          type_k=0, type_v=0)  # 0: GGML_TYPE_F32
    seq = prompt + tokens[:-1]
    llm.eval(seq)
    rows = np.array(llm.scores[:len(seq)], dtype=np.float32)[len(prompt) - 1:]
    want = np.fromfile(os.path.join(fixture, "logits.f32"), "<f4").reshape(len(tokens), -1)
    same = sum(int(rows[s].argmax() == tokens[s]) for s in range(len(tokens)))
    print(f"{os.path.basename(src)}: llama.cpp vs the fixture: max rel err {max_rel(rows, want):.3e},"
          f" argmax {same}/{len(tokens)}")
    if gplan:
        g = np.fromfile(gplan, "<f4").reshape(len(seq), -1)[len(prompt) - 1:]
        same = sum(int(rows[s].argmax() == g[s].argmax()) for s in range(len(tokens)))
        print(f"{os.path.basename(src)}: gplan vs llama.cpp: max rel err {max_rel(g, rows):.3e},"
              f" argmax {same}/{len(tokens)}")


if __name__ == "__main__":
    main()
