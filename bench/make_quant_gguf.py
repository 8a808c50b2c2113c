#!/usr/bin/env python3
"""A random-weight GGUF (version 3) in a quantized type mix, of the llama architecture or of
qwen3moe (Qwen3-MoE: per-head q and k norms, a router and merged experts as llama.cpp writes them),
written with numpy and struct only (no `gguf` package: the GPU machine may lack it), for timing
gplan's CUDA kernels side by side with llama.cpp on the same file (bench/gpu_gguf.sh).

usage: make_quant_gguf.py OUT.gguf [--shape llama3-8b|llama3.2-1b|qwen3moe-30b-a3b|tiny|...]
                          [--mix q4_k_m|q4_0|q8_0] [--size]  (--size: print the size, write nothing)
Block bytes are random, every block's f16 scales (d, and m / dmin where the type has them) drawn
in [1e-3, 3e-3], a tenth of that for the k-quants (whose 6- or 8-bit sub-scales multiply them), so
that weights are of a real model's size (a few 1e-2) and activations stay finite (the logits are
meaningless); norms 1 +- 0.05; the router (ffn_gate_inp, f32 as llama-quantize leaves it) its own
normal(0, 0.02) draws, so that every expert has a row of its own and the routing is spread.
The vocabulary is a synthetic sentencepiece one (llama.cpp needs one to load a model): <unk>,
<s>, </s>, the 256 byte tokens, then "t<i>" up to the shape's size. Mixes, as llama-quantize
makes them:
  q4_k_m: q4_k everywhere; attn_v and ffn_down (ffn_down_exps too) in q6_k on llama.cpp's "more
          bits" layers (the first and last eighth, and every third between: half of them at 32
          layers, 24 of 48); output q6_k.
  q4_0:   q4_0 everywhere, output q6_k (llama-quantize gives the head q6_k unless asked not to).
  q8_0:   q8_0 everywhere, the head too.
Norms and the router stay f32 in every mix (llama-quantize quantizes neither). Its 8-expert rules
(Mixtral's: attn_k and attn_v q8_0, attn_output q5_k) are not modelled: no shape has 8 experts.
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
    # Qwen3-30B-A3B: 48 layers, 2048 wide, 32 heads of 128 (4096 > hidden), 4 KV heads, 128 experts
    # of 768, 8 a token, 151936 tokens, untied head (inner: the config's intermediate_size, unused)
    "qwen3moe-30b-a3b": dict(arch="qwen3moe", layers=48, hidden=2048, inner=6144, heads=32, kv=4,
                             head_dim=128, experts=128, used=8, expert_inner=768, vocab=151936,
                             theta=1000000.0, ctx=40960, eps=1e-6),
    # a small one of its layout for checking (16 experts, not 8: see the mixes above; experts 256
    # wide, so that they take the 30B's k-quants, not llama-quantize's fallbacks for 128 columns)
    "qwen3moe-tiny": dict(arch="qwen3moe", layers=2, hidden=256, inner=512, heads=4, kv=2,
                          head_dim=64, experts=16, used=2, expert_inner=256, vocab=2048,
                          theta=1000000.0, ctx=1024, eps=1e-6),
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
    h, d = s["hidden"], s.get("head_dim", s["hidden"] // s["heads"])
    q, e = s["heads"] * d, s.get("experts", 0)
    assert e != 8, "llama-quantize's 8-expert rules are not modelled"
    base = "q4_k" if mix == "q4_k_m" else mix
    out = [("token_embd.weight", (h, s["vocab"]), base),
           ("output_norm.weight", (h,), "f32"),
           ("output.weight", (h, s["vocab"]), "q8_0" if mix == "q8_0" else "q6_k")]
    for i in range(s["layers"]):
        p = f"blk.{i}."
        six = "q6_k" if mix == "q4_k_m" and more_bits(i, s["layers"]) else base
        out += [(p + "attn_norm.weight", (h,), "f32"),
                (p + "attn_q.weight", (h, q), base),
                (p + "attn_k.weight", (h, s["kv"] * d), base),
                (p + "attn_v.weight", (h, s["kv"] * d), six),
                (p + "attn_output.weight", (q, h), base)]
        if e:  # qwen3moe: the experts of a layer merged, ne (in, out, expert)
            f = s["expert_inner"]
            out += [(p + "attn_q_norm.weight", (d,), "f32"),
                    (p + "attn_k_norm.weight", (d,), "f32"),
                    (p + "ffn_norm.weight", (h,), "f32"),
                    (p + "ffn_gate_inp.weight", (h, e), "f32"),
                    (p + "ffn_gate_exps.weight", (h, f, e), base),
                    (p + "ffn_up_exps.weight", (h, f, e), base),
                    (p + "ffn_down_exps.weight", (f, h, e), six)]
        else:
            out += [(p + "ffn_norm.weight", (h,), "f32"),
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
    ap.add_argument("--size", action="store_true", help="print the file's size, write nothing")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    arch = s.get("arch", "llama")
    rng = np.random.default_rng(7)
    ts = tensors(s, a.mix)

    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    vocab += [f"t{i}" for i in range(len(vocab), s["vocab"])]
    ttype = [2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259)
    # the hyperparameters under the architecture's prefix, as llama.cpp's converter writes them
    # (for qwen3moe: the head size, the experts, no rope.dimension_count and no vocab_size)
    hp = [("block_count", U32, s["layers"]),
          ("context_length", U32, s["ctx"]),
          ("embedding_length", U32, s["hidden"]),
          ("feed_forward_length", U32, s["inner"]),
          ("attention.head_count", U32, s["heads"]),
          ("attention.head_count_kv", U32, s["kv"]),
          ("rope.freq_base", F32, s["theta"])]
    if arch == "llama":
        hp += [("rope.dimension_count", U32, s["hidden"] // s["heads"]),
               ("attention.layer_norm_rms_epsilon", F32, 1e-5),
               ("vocab_size", U32, s["vocab"])]
    else:
        hp += [("attention.layer_norm_rms_epsilon", F32, s["eps"]),
               ("attention.key_length", U32, s["head_dim"]),
               ("attention.value_length", U32, s["head_dim"]),
               ("expert_count", U32, s["experts"]),
               ("expert_used_count", U32, s["used"]),
               ("expert_feed_forward_length", U32, s["expert_inner"])]
    meta = [
        kv("general.architecture", STR, arch),
        kv("general.name", STR, f"random {a.shape} {a.mix}"),
        kv("general.file_type", U32, FILE_TYPE[a.mix]),
        kv("general.alignment", U32, ALIGN),
    ] + [kv(f"{arch}.{key}", t, v) for key, t, v in hp] + [
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
    if a.size:
        n = len(head) + off
        print(f"{a.out}: {a.shape} {a.mix}, {len(ts)} tensors, {n} bytes ({n / 2**30:.2f} GiB)")
        return
    pats = {}
    with open(a.out, "wb") as f:
        f.write(head)
        for name, dims, t in ts:
            if t not in pats:
                pats[t] = pattern(t, rng)
            p, n = pats[t], nbytes(dims, t)
            if name.endswith("ffn_gate_inp.weight"):
                p = rng.normal(0, 0.02, n // 4).astype("<f4").tobytes()
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
