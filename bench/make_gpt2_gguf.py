#!/usr/bin/env python3
"""A random-weight GPT-2 117M GGUF (llama.cpp's gpt2 architecture and layouts: Linear weights
[out, in], fused qkv, tied LM head), f16 matrices and f32 norms and biases, with the GPT-2
tokenizer of a GGUF vocabulary file, for bench/cpu.sh side by side with llama-bench.

usage: make_gpt2_gguf.py OUT.gguf VOCAB.gguf (e.g. ../shared/data/vocab/ggml-vocab-gpt-2.gguf)
Weights: normal(0, 0.02), norms 1 +- 0.05, biases 0.01 normal, fixed seed."""
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../scripts/parity"))
from gguf_write import add_vocab, write_gguf  # noqa: E402

LAYERS, EMBD, HEADS, CTX, EPS = 12, 768, 12, 1024, 1e-5


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, vocab = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(2)
    v = gguf.GGUFReader(vocab)
    w = gguf.GGUFWriter(out, "gpt2")
    w.add_block_count(LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_feed_forward_length(4 * EMBD)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(EPS)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab = add_vocab(w, v)  # (GPT-2's vocabulary has no scores)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def vec(n, base=0.0, sd=0.01):
        return (base + rng.standard_normal(n, dtype=np.float32) * sd).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, EMBD))
    w.add_tensor("position_embd.weight", mat(CTX, EMBD))
    w.add_tensor("output_norm.weight", vec(EMBD, 1.0, 0.05))
    w.add_tensor("output_norm.bias", vec(EMBD))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", vec(EMBD, 1.0, 0.05))
        w.add_tensor(p + "attn_norm.bias", vec(EMBD))
        w.add_tensor(p + "attn_qkv.weight", mat(3 * EMBD, EMBD))
        w.add_tensor(p + "attn_qkv.bias", vec(3 * EMBD))
        w.add_tensor(p + "attn_output.weight", mat(EMBD, EMBD))
        w.add_tensor(p + "attn_output.bias", vec(EMBD))
        w.add_tensor(p + "ffn_norm.weight", vec(EMBD, 1.0, 0.05))
        w.add_tensor(p + "ffn_norm.bias", vec(EMBD))
        w.add_tensor(p + "ffn_up.weight", mat(4 * EMBD, EMBD))
        w.add_tensor(p + "ffn_up.bias", vec(4 * EMBD))
        w.add_tensor(p + "ffn_down.weight", mat(EMBD, 4 * EMBD))
        w.add_tensor(p + "ffn_down.bias", vec(EMBD))
    write_gguf(w)


if __name__ == "__main__":
    main()
