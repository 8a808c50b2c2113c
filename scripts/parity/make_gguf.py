#!/usr/bin/env python3
"""A parity fixture's checkpoint (FIXTURE/config.json, model.safetensors) as a GGUF file in
llama.cpp's layout, written with gguf-py's GGUFWriter: the reference for tests/parity/to_gguf.c
(parity-to-gguf), which writes the same bytes at test time without Python
(tests/parity/to_gguf_check.sh compares the two).

As convert_hf_to_gguf.py converts the two architectures:
- gpt2: Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed to [out, in];
  the attn.bias / attn.masked_bias buffers dropped.
- llama (model_type llama or mistral): q_proj and k_proj rows permuted for ggml's interleaved rope
  (LlamaModel.permute); a tied lm_head dropped.
Tensors in the checkpoint's name order, f32, or with --f16 the 2-dim ones f16 (the converter's
default outtype). --sliding-window also writes llama.attention.sliding_window (the converter does
not for llama files); --no-head-dim writes no attention.key_length / value_length (as the converter
does for a config without head_dim).

usage: make_gguf.py [--f16] [--sliding-window] [--no-head-dim] FIXTURE_DIR OUT.gguf
Needs numpy and gguf only (the safetensors header is read here)."""
import json
import os
import struct
import sys

import numpy as np
import gguf

CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
GPT2_NAMES = {"transformer.wte": "token_embd", "transformer.wpe": "position_embd",
              "transformer.ln_f": "output_norm", "lm_head": "output"}
GPT2_LAYER = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
              "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
LLAMA_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
LLAMA_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
               "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: {info['dtype']} (the fixtures are f32)"
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])
    return out


def gguf_name(name, gpt2):
    stem, kind = name.rsplit(".", 1)
    top, layer, prefix = (GPT2_NAMES, GPT2_LAYER, "transformer.h.") if gpt2 else \
        (LLAMA_NAMES, LLAMA_LAYER, "model.layers.")
    if stem.startswith(prefix):
        l, rest = stem[len(prefix):].split(".", 1)
        return f"blk.{l}.{layer[rest]}.{kind}"
    return f"{top[stem]}.{kind}"


def permute(w, heads):
    """LlamaModel.permute: row h*d + 2j + i of the result is row h*d + i*d/2 + j of w."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def main():
    args = sys.argv[1:]
    f16 = "--f16" in args
    window = "--sliding-window" in args
    no_head_dim = "--no-head-dim" in args
    args = [a for a in args if a not in ("--f16", "--sliding-window", "--no-head-dim")]
    if len(args) != 2:
        sys.exit(__doc__)
    fixture, out = args
    with open(os.path.join(fixture, "config.json")) as f:
        cfg = json.load(f)
    gpt2 = cfg["model_type"] == "gpt2"
    assert gpt2 or cfg["model_type"] in ("llama", "mistral"), cfg["model_type"]
    arch = "gpt2" if gpt2 else "llama"
    w = gguf.GGUFWriter(out, arch)
    if gpt2:
        w.add_block_count(cfg["n_layer"])
        w.add_context_length(cfg.get("n_ctx", cfg["n_positions"]))
        w.add_embedding_length(cfg["n_embd"])
        w.add_feed_forward_length(4 * cfg["n_embd"])
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    else:
        heads = cfg["num_attention_heads"]
        kv_heads = cfg.get("num_key_value_heads") or heads
        theta = cfg.get("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta", 10000.0))
        w.add_block_count(cfg["num_hidden_layers"])
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(cfg["hidden_size"])
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_head_count(heads)
        w.add_head_count_kv(kv_heads)
        w.add_rope_freq_base(theta)
        w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        if cfg.get("head_dim") is not None and not no_head_dim:
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        if window:
            w.add_sliding_window(cfg["sliding_window"])
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)

    tensors = read_safetensors(os.path.join(fixture, "model.safetensors"))
    for name in sorted(tensors):
        t = tensors[name]
        if gpt2 and name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        if gpt2 and name.endswith(CONV1D):
            t = t.T
        elif not gpt2 and ".self_attn.q_proj." in name:
            t = permute(t, heads)
        elif not gpt2 and ".self_attn.k_proj." in name:
            t = permute(t, kv_heads)
        t = np.ascontiguousarray(t, dtype=np.float16 if f16 and t.ndim == 2 else np.float32)
        w.add_tensor(gguf_name(name, gpt2), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
