#!/usr/bin/env python3
"""A random-weight llama-architecture GGUF (version 3) in a quantized type mix, written with numpy
and struct only (no `gguf` package: the GPU machine may lack it), for timing gplan's CUDA kernels
side by side with llama.cpp on the same file (bench/gpu_gguf.sh).

usage: make_quant_gguf.py OUT.gguf --shape llama3-8b|llama3.2-1b [--mix q4_k_m|q4_0|q8_0]
Block bytes are random, every block's f16 scales (d, and m / dmin where the type has them) drawn
in [1e-3, 3e-3], a tenth of that for the k-quants (whose 6- or 8-bit sub-scales multiply them), so
that weights are of a real model's size (a few 1e-2) and activations stay finite (the logits are
meaningless); norms 1 +- 0.05.
The vocabulary is a synthetic sentencepiece one (llama.cpp needs one to load a model): <unk>,
<s>, </s>, the 256 byte tokens, then "t<i>" up to the shape's size. Mixes, as llama-quantize
makes them:
  q4_k_m: q4_k everywhere; attn_v and ffn_down in q6_k on llama.cpp's "more bits" layers (the
          first and last eighth, and every third between: half of them at 32 layers); output q6_k.
  q4_0:   q4_0 everywhere, output q6_k (llama-quantize gives the head q6_k unless asked not to).
  q8_0:   q8_0 everywhere, the head too.
The file is written in large repeated slices of one random buffer per type (fast: the bytes'
values do not matter for timing)."""
import argparse
import struct
import sys

import numpy as np

SHAPES = {
    # Meta-Llama-3-8B: 32 layers, 4096 wide, 14336 inner, 32 heads, 8 KV heads, 128256 tokens
    "llama3-8b": dict(layers=32, hidden=4096, inner=14336, heads=32, kv=8, vocab=128256,
                      theta=500000.0, ctx=8192),
    # Llama-3.2-1B: 16 layers, 2048 wide, 8192 inner, 32 heads (64 dims), 8 KV heads
    "llama3.2-1b": dict(layers=16, hidden=2048, inner=8192, heads=32, kv=8, vocab=128256,
                        theta=500000.0, ctx=8192),
    # a small one for checking this script and the pipeline on a CPU
    "tiny": dict(layers=2, hidden=256, inner=512, heads=4, kv=2, vocab=2048, theta=10000.0,
                 ctx=1024),
}

# ggml type ids, block elements, block bytes, byte offsets of the f16 scales in a block
TYPES = {
    "f32": (0, 1, 4, ()),
    "q4_0": (2, 32, 18, (0,)),
    "q4_1": (3, 32, 20, (0, 2)),
    "q5_0": (6, 32, 22, (0,)),
    "q5_1": (7, 32, 24, (0, 2)),
    "q8_0": (8, 32, 34, (0,)),
    "q4_k": (12, 256, 144, (0, 2)),
    "q5_k": (13, 256, 176, (0, 2)),
    "q6_k": (14, 256, 210, (208,)),
}
FILE_TYPE = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15}  # llama.cpp's general.file_type values
ALIGN = 32

U32, I32, F32, STR, ARR = 4, 5, 6, 8, 9


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == U32:
        return out + struct.pack("<I", value)
    if vtype == F32:
        return out + struct.pack("<f", value)
    if vtype == STR:
        return out + gstr(value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = gstr(key) + struct.pack("<IIQ", ARR, etype, len(values))
    if etype == STR:
        return out + b"".join(gstr(v) for v in values)
    fmt = {I32: "<i", F32: "<f"}[etype]
    return out + np.asarray(values, dtype=fmt).tobytes()


def more_bits(i, n):
    """llama.cpp's use_more_bits: the layers Q4_K_M gives q6_k for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(s, mix):
    """(name, ggml dims (fastest first), type) in file order."""
    h, d = s["hidden"], s["hidden"] // s["heads"]
    base = "q4_k" if mix == "q4_k_m" else mix
    out = [("token_embd.weight", (h, s["vocab"]), base),
           ("output_norm.weight", (h,), "f32"),
           ("output.weight", (h, s["vocab"]), "q8_0" if mix == "q8_0" else "q6_k")]
    for i in range(s["layers"]):
        p = f"blk.{i}."
        six = "q6_k" if mix == "q4_k_m" and more_bits(i, s["layers"]) else base
        out += [(p + "attn_norm.weight", (h,), "f32"),
                (p + "attn_q.weight", (h, h), base),
                (p + "attn_k.weight", (h, s["kv"] * d), base),
                (p + "attn_v.weight", (h, s["kv"] * d), six),
                (p + "attn_output.weight", (h, h), base),
                (p + "ffn_norm.weight", (h,), "f32"),
                (p + "ffn_gate.weight", (h, s["inner"]), base),
                (p + "ffn_up.weight", (h, s["inner"]), base),
                (p + "ffn_down.weight", (s["inner"], h), six)]
    return out


def nbytes(dims, t):
    _, qk, bs, _ = TYPES[t]
    n = int(np.prod(dims))
    assert n % qk == 0 and dims[0] % qk == 0, (dims, t)
    return n // qk * bs


def pattern(t, rng, nblocks=1 << 16):
    """One random buffer of whole blocks of type t with sane scales (f32: norms 1 +- 0.05)."""
    _, _, bs, scales = TYPES[t]
    if t == "f32":
        return (1 + rng.uniform(-0.05, 0.05, nblocks)).astype("<f4").tobytes()
    b = np.frombuffer(rng.bytes(nblocks * bs), dtype=np.uint8).reshape(nblocks, bs).copy()
    lo = 1e-4 if t.endswith("_k") else 1e-3
    for off in scales:
        f = rng.uniform(lo, 3 * lo, nblocks).astype("<f2").view(np.uint8).reshape(nblocks, 2)
        b[:, off:off + 2] = f
    return b.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--mix", default="q4_k_m", choices=sorted(FILE_TYPE))
    a = ap.parse_args()
    s = SHAPES[a.shape]
    rng = np.random.default_rng(7)
    ts = tensors(s, a.mix)

    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    vocab += [f"t{i}" for i in range(len(vocab), s["vocab"])]
    ttype = [2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259)
    meta = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, f"random {a.shape} {a.mix}"),
        kv("general.file_type", U32, FILE_TYPE[a.mix]),
        kv("general.alignment", U32, ALIGN),
        kv("llama.block_count", U32, s["layers"]),
        kv("llama.context_length", U32, s["ctx"]),
        kv("llama.embedding_length", U32, s["hidden"]),
        kv("llama.feed_forward_length", U32, s["inner"]),
        kv("llama.attention.head_count", U32, s["heads"]),
        kv("llama.attention.head_count_kv", U32, s["kv"]),
        kv("llama.rope.freq_base", F32, s["theta"]),
        kv("llama.rope.dimension_count", U32, s["hidden"] // s["heads"]),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("llama.vocab_size", U32, s["vocab"]),
        kv("tokenizer.ggml.model", STR, "llama"),
        kv_array("tokenizer.ggml.tokens", STR, vocab),
        kv_array("tokenizer.ggml.scores", F32, [-float(i) for i in range(s["vocab"])]),
        kv_array("tokenizer.ggml.token_type", I32, ttype),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
    ]
    infos, off = [], 0
    for name, dims, t in ts:
        infos.append(gstr(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", x) for x in dims) +
                     struct.pack("<IQ", TYPES[t][0], off))
        off += (nbytes(dims, t) + ALIGN - 1) // ALIGN * ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGN)
    pats = {}
    with open(a.out, "wb") as f:
        f.write(head)
        for name, dims, t in ts:
            if t not in pats:
                pats[t] = pattern(t, rng)
            p, n = pats[t], nbytes(dims, t)
            while n > 0:
                k = min(n, len(p))
                f.write(p[:k])
                n -= k
            f.write(b"\0" * (-nbytes(dims, t) % ALIGN))
    total = sum(nbytes(d, t) for _, d, t in ts)
    print(f"{a.out}: {a.shape} {a.mix}, {len(ts)} tensors, {total / 2**30:.2f} GiB of tensor data",
          file=sys.stderr)


if __name__ == "__main__":
    main()
