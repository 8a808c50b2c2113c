#!/usr/bin/env python3
"""A random-weight llama-architecture GGUF of a given shape, f16, with the tokenizer of a GGUF
vocabulary file (llama.cpp needs one to load a model), for benchmarks side by side with llama.cpp
(quantize it with llama-quantize to compare quantized kernels on the same file).

usage: make_random_gguf.py OUT.gguf VOCAB.gguf [--shape tinyllama|smollm2|NAME=VALUE,...]
Weights: normal(0, 0.02), norms 1 +- 0.05, fixed seed."""
import argparse

import numpy as np
import gguf

SHAPES = {
    # TinyLlama-1.1B: 22 layers, 2048 wide, 5632 inner, 32 heads, 4 KV heads, 32000 tokens
    "tinyllama": dict(layers=22, hidden=2048, inner=5632, heads=32, kv=4, ctx=2048,
                      theta=10000.0, eps=1e-5),
    "smollm2": dict(layers=30, hidden=576, inner=1536, heads=9, kv=3, ctx=8192,
                    theta=100000.0, eps=1e-5),
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
    tokens = [bytes(v.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
              for i in v.fields["tokenizer.ggml.tokens"].data]
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_block_count(s["layers"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["inner"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model(v.fields["tokenizer.ggml.model"].contents())
    w.add_token_list(tokens)
    if "tokenizer.ggml.scores" in v.fields:
        w.add_token_scores([float(x) for x in v.fields["tokenizer.ggml.scores"].contents()])
    if "tokenizer.ggml.token_type" in v.fields:
        w.add_token_types([int(x) for x in v.fields["tokenizer.ggml.token_type"].contents()])
    if "tokenizer.ggml.merges" in v.fields:
        w.add_token_merges(v.fields["tokenizer.ggml.merges"].contents())
    for key, fn in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id)):
        f = v.fields.get(f"tokenizer.ggml.{key}_token_id")
        if f is not None:
            fn(int(f.contents()))

    def lin(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm(n):
        return (1 + rng.uniform(-0.05, 0.05, n)).astype(np.float32)

    h, d = s["hidden"], s["hidden"] // s["heads"]
    w.add_tensor("token_embd.weight", lin(n_vocab, h))
    w.add_tensor("output_norm.weight", norm(h))
    w.add_tensor("output.weight", lin(n_vocab, h))
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(h))
        w.add_tensor(p + "attn_q.weight", lin(h, h))
        w.add_tensor(p + "attn_k.weight", lin(s["kv"] * d, h))
        w.add_tensor(p + "attn_v.weight", lin(s["kv"] * d, h))
        w.add_tensor(p + "attn_output.weight", lin(h, h))
        w.add_tensor(p + "ffn_norm.weight", norm(h))
        w.add_tensor(p + "ffn_gate.weight", lin(s["inner"], h))
        w.add_tensor(p + "ffn_up.weight", lin(s["inner"], h))
        w.add_tensor(p + "ffn_down.weight", lin(h, s["inner"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
