#!/usr/bin/env python3
"""A random-weight GGUF of a given shape, f16, with the tokenizer of a GGUF vocabulary file
(llama.cpp needs one to load a model), for benchmarks side by side with llama.cpp (quantize it with
llama-quantize to compare quantized kernels on the same file): the llama architecture, or qwen3moe
(q/k norms, routed experts as llama.cpp writes them: ffn_gate_inp and merged ffn_*_exps).

usage: make_random_gguf.py OUT.gguf VOCAB.gguf [--shape tinyllama|smollm2|qwen3moe-small]
Weights: normal(0, 0.02), norms 1 +- 0.05, fixed seed."""
import argparse
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../parity"))
from gguf_write import add_vocab, write_gguf  # noqa: E402

SHAPES = {
    # TinyLlama-1.1B: 22 layers, 2048 wide, 5632 inner, 32 heads, 4 KV heads, 32000 tokens
    "tinyllama": dict(layers=22, hidden=2048, inner=5632, heads=32, kv=4, ctx=2048,
                      theta=10000.0, eps=1e-5),
    "smollm2": dict(layers=30, hidden=576, inner=1536, heads=9, kv=3, ctx=8192,
                    theta=100000.0, eps=1e-5),
    # a small Qwen3-MoE (the 30B-A3B's layout: 128 experts, 8 used, 768 inner, head_dim 128,
    # scaled down): 12 layers, 1024 wide, 32 experts of 512, 8 used; ~0.7 B weights, 0.2 B a token
    "qwen3moe-small": dict(arch="qwen3moe", layers=12, hidden=1024, inner=512, heads=16, kv=4,
                           head_dim=64, experts=32, used=8, ctx=4096, theta=1000000.0, eps=1e-6),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("vocab")
    ap.add_argument("--shape", default="tinyllama")
    a = ap.parse_args()
    s = dict(SHAPES[a.shape])
    rng = np.random.default_rng(1)
    v = gguf.GGUFReader(a.vocab)
    arch = s.get("arch", "llama")
    moe = "experts" in s
    w = gguf.GGUFWriter(a.out, arch)
    w.add_block_count(s["layers"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["inner"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    d = s.get("head_dim", s["hidden"] // s["heads"])
    w.add_rope_dimension_count(d)
    if "head_dim" in s:
        w.add_key_length(d)
        w.add_value_length(d)
    if moe:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["used"])
        w.add_expert_feed_forward_length(s["inner"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab = add_vocab(w, v)
    for key, fn in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id)):
        f = v.fields.get(f"tokenizer.ggml.{key}_token_id")
        if f is not None:
            fn(int(f.contents()))

    def lin(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def norm(n):
        return (1 + rng.uniform(-0.05, 0.05, n)).astype(np.float32)

    h, q = s["hidden"], s["heads"] * d
    w.add_tensor("token_embd.weight", lin(n_vocab, h))
    w.add_tensor("output_norm.weight", norm(h))
    w.add_tensor("output.weight", lin(n_vocab, h))
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(h))
        w.add_tensor(p + "attn_q.weight", lin(q, h))
        w.add_tensor(p + "attn_k.weight", lin(s["kv"] * d, h))
        w.add_tensor(p + "attn_v.weight", lin(s["kv"] * d, h))
        w.add_tensor(p + "attn_output.weight", lin(h, q))
        w.add_tensor(p + "ffn_norm.weight", norm(h))
        if arch == "qwen3moe":
            w.add_tensor(p + "attn_q_norm.weight", norm(d))
            w.add_tensor(p + "attn_k_norm.weight", norm(d))
        if moe:  # numpy [E, rows, cols]: ggml's ne = (cols, rows, E)
            e = s["experts"]
            w.add_tensor(p + "ffn_gate_inp.weight", lin(e, h).astype(np.float32))
            w.add_tensor(p + "ffn_gate_exps.weight", lin(e, s["inner"], h))
            w.add_tensor(p + "ffn_up_exps.weight", lin(e, s["inner"], h))
            w.add_tensor(p + "ffn_down_exps.weight", lin(e, h, s["inner"]))
        else:
            w.add_tensor(p + "ffn_gate.weight", lin(s["inner"], h))
            w.add_tensor(p + "ffn_up.weight", lin(s["inner"], h))
            w.add_tensor(p + "ffn_down.weight", lin(h, s["inner"]))
    write_gguf(w)


if __name__ == "__main__":
    main()
