#!/usr/bin/env python3
"""Makes Hugging Face tokenizer folders (tokenizer.json + tokenizer_config.json) from llama.cpp's
GGUF test vocabularies with the `tokenizers` library, so that the tokenizer.json loader can be
checked against the same .inp/.out files as the GGUF one. The pre-tokenizer patterns are read
from tokenizer/pretok.c (one table for both). Each folder is checked with Hugging Face itself
against the .out ids before it is written.

usage: make_json.py VOCAB_DIR OUT_DIR [NAME ...]   (pip install gguf tokenizers)
"""
import codecs
import json
import os
import re
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
PRETOK_C = os.path.join(HERE, "..", "..", "tokenizer", "pretok.c")
NAMES = ["gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2", "qwen35", "deepseek-llm",
         "deepseek-coder", "falcon", "starcoder", "refact", "mpt", "command-r", "gemma-4"]


def c_strings(body, macros):
    """The C string literals of an initializer, adjacent ones joined, macros expanded."""
    out, cur = [], None
    for tok in re.finditer(r'"((?:[^"\\]|\\.)*)"|([A-Z_0-9]+)|(,)', body, re.S):
        if tok.group(3):
            if cur is not None:
                out.append(cur)
            cur = None
            continue
        piece = macros[tok.group(2)] if tok.group(2) else \
            codecs.escape_decode(tok.group(1).encode("utf-8"))[0].decode("utf-8")
        cur = piece if cur is None else cur + piece
    if cur is not None:
        out.append(cur)
    return out


def pretok_table():
    src = open(PRETOK_C, encoding="utf-8").read()
    macros = {}
    for m in re.finditer(r'#define ([A-Z_0-9]+) (".*")', src):
        macros[m.group(1)] = c_strings(m.group(2), {})[0]
    arrays = {}
    for m in re.finditer(r'static const char \*const (\w+)\[\] = \{(.*?)\n\};', src, re.S):
        arrays[m.group(1)] = c_strings(m.group(2), macros)
    table = {}
    for m in re.finditer(r'\{((?:"[^"]*"\s*)+),\s*SET\((\w+)\),\s*(\d)\}', src):
        names = "".join(re.findall(r'"([^"]*)"', m.group(1))).split()
        for n in names:
            table[n] = (arrays[m.group(2)], m.group(3) == "1")
    return table


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def read_cases(base):
    inp = open(base + ".inp", encoding="utf-8", newline="").read()
    out = open(base + ".out", encoding="utf-8").read().split("\n")
    texts = inp.split("\n__ggml_vocab_test__\n")[:-1]
    return [(t, [int(x) for x in out[i].split()]) for i, t in enumerate(texts)]


def build(path, table):
    r = gguf.GGUFReader(path)
    model = field(r, "tokenizer.ggml.model")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type") or [1] * len(tokens)
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    vocab = {}
    for i, t in enumerate(tokens):
        vocab[t] = i
    added = [AddedToken(tokens[i], special=(ty == 3), normalized=False)
             for i, ty in enumerate(types) if ty in (3, 4)]
    if model == "gpt2":
        pre = field(r, "tokenizer.ggml.pre") or "default"
        pats, ignore = table[pre]
        merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore))
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in pats] +
            [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tk.decoder = decoders.ByteLevel()
        add_bos_default = ignore
    elif model == "llama":
        scores = field(r, "tokenizer.ggml.scores")
        ok = {i for i, ty in enumerate(types) if ty in (0, 1, 4)}
        merges = []
        for i, t in enumerate(tokens):
            if i not in ok:
                continue
            for k in range(1, len(t)):
                a, b = vocab.get(t[:k]), vocab.get(t[k:])
                if a in ok and b in ok:
                    merges.append((-scores[i], i, k, t[:k], t[k:]))
        merges.sort()
        unk = field(r, "tokenizer.ggml.unknown_token_id")
        tk = Tokenizer(models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges],
                                  byte_fallback=True, fuse_unk=True,
                                  unk_token=tokens[unk] if unk is not None else None))
        space = field(r, "tokenizer.ggml.add_space_prefix")
        norms = [normalizers.Replace(" ", "\u2581")]
        if space is None or space:
            norms.insert(0, normalizers.Prepend("\u2581"))
        tk.normalizer = normalizers.Sequence(norms)
        tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        add_bos_default = True
    elif model == "gemma4":
        # SentencePiece-style text with ranked merges; newline runs split from the rest
        merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
        unk = field(r, "tokenizer.ggml.unknown_token_id")
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True,
                                  unk_token=tokens[unk] if unk is not None else None))
        tk.normalizer = normalizers.Replace(" ", "\u2581")
        tk.pre_tokenizer = pre_tokenizers.Split(Regex("[^\n]+|[\n]+"), behavior="isolated")
        tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                        decoders.Fuse()])
        add_bos_default = True
    else:
        raise SystemExit(f"{path}: model {model} not supported")
    tk.add_tokens(added)
    add_bos = field(r, "tokenizer.ggml.add_bos_token")
    add_eos = field(r, "tokenizer.ggml.add_eos_token")
    config = {
        "add_bos_token": add_bos_default if add_bos is None else bool(add_bos),
        "add_eos_token": False if add_eos is None else bool(add_eos),
    }
    if bos is not None:
        config["bos_token"] = tokens[bos]
    if eos is not None:
        config["eos_token"] = tokens[eos]
    tmpl = field(r, "tokenizer.chat_template")
    if tmpl:
        config["chat_template"] = tmpl
    return tk, config


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    vocab_dir, out_dir = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or NAMES
    table = pretok_table()
    failed = 0
    for name in names:
        base = os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf")
        if not os.path.exists(base):
            print(f"{name}: skipped ({base} not found)")
            continue
        tk, config = build(base, table)
        bad = [i for i, (t, want) in enumerate(read_cases(base))
               if tk.encode(t, add_special_tokens=False).ids != want]
        if bad:
            print(f"{name}: Hugging Face gives other ids than the .out for cases {bad[:10]}")
            failed += 1
            continue
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        tk.save(os.path.join(d, "tokenizer.json"), pretty=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=1)
            f.write("\n")
        print(f"{name}: {d} ({os.path.getsize(os.path.join(d, 'tokenizer.json'))} bytes)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
