#!/usr/bin/env python3
"""A parity fixture's checkpoint (FIXTURE/config.json, model.safetensors) as a GGUF file in
llama.cpp's layout, written with gguf-py's GGUFWriter: the reference for tests/parity/to_gguf.c
(parity-to-gguf), which writes the same bytes at test time without Python
(tests/parity/to_gguf_check.sh compares the two).

As convert_hf_to_gguf.py converts the architectures:
- gpt2: Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed to [out, in];
  the attn.bias / attn.masked_bias buffers dropped.
- llama (model_type llama or mistral): q_proj and k_proj rows permuted for ggml's interleaved rope
  (LlamaModel.permute). With rope_type "llama3" (rope_parameters, its full_attention entry, or
  rope_scaling) no rope scaling metadata but rope_freqs.weight, first: each pair's factor, as
  LlamaModel.generate_extra_tensors computes it (in float32, as torch does there).
- gemma2, gemma3 (model_type gemma3 or gemma3_text): every norm weight + 1; Gemma 2's lm_head
  dropped. phi3: the fused tensors as they are. Their names from gguf-py's TensorNameMap, not
  from gplan's table.
- a tied lm_head dropped.
Tensors in the checkpoint's name order, f32, or with --f16 the 2-dim ones f16 (the converter's
default outtype). --sliding-window also writes llama.attention.sliding_window (the converter does
not for llama files); --no-head-dim writes no attention.key_length / value_length (as the converter
does for a config without head_dim). Each KEY=u32:N, KEY=f32:X or KEY=str:S after OUT adds
ARCH.KEY or replaces it in place, as parity-to-gguf does.

usage: make_gguf.py [--f16] [--sliding-window] [--no-head-dim] FIXTURE_DIR OUT.gguf [KEY=...]...
Needs numpy and gguf only (the safetensors header is read here)."""
import json
import math
import os
import struct
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_write import write_gguf  # noqa: E402

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


def rope_freqs(cfg):
    """The converter's rope_freqs tensor for a llama3 rope scaling, or None."""
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rp = rp.get("full_attention", rp)
    if rp.get("rope_type", "").lower() != "llama3":
        return None
    f32 = np.float32
    base = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = f32(1.0) / (f32(base) ** (np.arange(0, dim, 2, dtype=f32) / f32(dim)))
    factor = rp.get("factor", 8.0)
    low, high = rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old_len = rp.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < f32(old_len / high):
            out.append(1.0)
        elif wavelen > f32(old_len / low):
            out.append(factor)
        else:
            smooth = (f32(old_len) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=f32)


ARCHS = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "gemma2": "gemma2",
         "gemma3": "gemma3", "gemma3_text": "gemma3", "phi3": "phi3"}


def num(cfg, *paths):
    """The first dotted path that holds a number, else None."""
    for path in paths:
        v = cfg
        for part in path.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    return None


def metadata(cfg, arch, window, no_head_dim):
    """The ARCH.* keys in parity-to-gguf's order: [(key, "u32" | "f32" | "str", value)]."""
    kv = []
    u32 = lambda k, v: kv.append((k, "u32", v))
    f32 = lambda k, v: kv.append((k, "f32", v))
    if arch == "gpt2":
        u32("block_count", cfg["n_layer"])
        u32("context_length", cfg.get("n_ctx", cfg["n_positions"]))
        u32("embedding_length", cfg["n_embd"])
        u32("feed_forward_length", 4 * cfg["n_embd"])
        u32("attention.head_count", cfg["n_head"])
        f32("attention.layer_norm_epsilon", cfg["layer_norm_epsilon"])
        return kv
    heads = cfg["num_attention_heads"]
    u32("block_count", cfg["num_hidden_layers"])
    u32("context_length", cfg["max_position_embeddings"])
    u32("embedding_length", cfg["hidden_size"])
    u32("feed_forward_length", cfg["intermediate_size"])
    u32("attention.head_count", heads)
    u32("attention.head_count_kv", cfg.get("num_key_value_heads") or heads)
    if arch == "llama":
        f32("rope.freq_base", num(cfg, "rope_theta", "rope_parameters.rope_theta") or 10000.0)
    f32("attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    if arch == "llama":
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        if cfg.get("head_dim") is not None and not no_head_dim:
            u32("attention.key_length", head_dim)
            u32("attention.value_length", head_dim)
        if window:
            u32("attention.sliding_window", cfg["sliding_window"])
        u32("vocab_size", cfg["vocab_size"])
        u32("rope.dimension_count", head_dim)
    elif arch == "gemma2":
        u32("attention.key_length", cfg["head_dim"])
        u32("attention.value_length", cfg["head_dim"])
        f32("attn_logit_softcapping", cfg["attn_logit_softcapping"])
        f32("final_logit_softcapping", cfg["final_logit_softcapping"])
        u32("attention.sliding_window", cfg["sliding_window"])
    elif arch == "gemma3":
        u32("attention.key_length", cfg["head_dim"])
        u32("attention.value_length", cfg["head_dim"])
        v = num(cfg, "rope_parameters.full_attention.rope_theta", "rope_theta")
        if v is not None:
            f32("rope.freq_base", v)
        v = num(cfg, "rope_parameters.sliding_attention.rope_theta", "rope_local_base_freq")
        if v is not None:
            f32("rope.freq_base_swa", v)
        rp = cfg.get("rope_parameters") or {}
        scaling = rp.get("full_attention") if isinstance(rp, dict) and "full_attention" in rp \
            else cfg.get("rope_scaling")
        if isinstance(scaling, dict) and scaling.get("rope_type") == "linear" and \
                num(scaling, "factor") is not None:
            kv.append(("rope.scaling.type", "str", "linear"))
            f32("rope.scaling.factor", scaling["factor"])
        if num(cfg, "final_logit_softcapping"):
            f32("final_logit_softcapping", cfg["final_logit_softcapping"])
        if num(cfg, "sliding_window_pattern") != 1:
            u32("attention.sliding_window", cfg["sliding_window"])
    else:  # phi3
        v = num(cfg, "original_max_position_embeddings",
                "rope_parameters.original_max_position_embeddings")
        if v is not None:
            u32("rope.scaling.original_context_length", v)
        rot = num(cfg, "rope_parameters.partial_rotary_factor", "partial_rotary_factor") or 1
        u32("rope.dimension_count", int(int(rot * cfg["hidden_size"]) // heads))
        f32("rope.freq_base", num(cfg, "rope_parameters.rope_theta", "rope_theta"))
        u32("attention.sliding_window", num(cfg, "sliding_window") or 0)
    return kv


def main():
    args = sys.argv[1:]
    flags = [a for a in args if a.startswith("--")]
    unknown = set(flags) - {"--f16", "--sliding-window", "--no-head-dim"}
    args = [a for a in args if not a.startswith("--")]
    if unknown or len(args) < 2:
        sys.exit(__doc__)
    f16 = "--f16" in flags
    fixture, out, extras = args[0], args[1], args[2:]
    with open(os.path.join(fixture, "config.json")) as f:
        cfg = json.load(f)
    arch = ARCHS[cfg["model_type"]]
    kv = metadata(cfg, arch, "--sliding-window" in flags, "--no-head-dim" in flags)
    for e in extras:
        key, typed = e.split("=", 1)
        typ, val = typed.split(":", 1)
        val = {"u32": lambda s: int(float(s)), "f32": float, "str": str}[typ](val)
        at = [i for i, (k, _, _) in enumerate(kv) if k == key]
        if at:
            kv[at[0]] = (key, typ, val)
        else:
            kv.append((key, typ, val))
    w = gguf.GGUFWriter(out, arch)
    add = {"u32": w.add_uint32, "f32": w.add_float32, "str": w.add_string}
    for key, typ, val in kv:
        add[typ](f"{arch}.{key}", val)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)

    gpt2 = arch == "gpt2"
    heads = cfg.get("num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    names = None
    if arch in ("gemma2", "gemma3", "phi3"):
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    tensors = read_safetensors(os.path.join(fixture, "model.safetensors"))
    factors = rope_freqs(cfg) if arch == "llama" else None
    if factors is not None:
        w.add_tensor("rope_freqs.weight", factors)
    for name in sorted(tensors):
        t = tensors[name]
        if gpt2 and name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if name == "lm_head.weight" and (cfg.get("tie_word_embeddings") or arch == "gemma2"):
            continue
        if gpt2 and name.endswith(CONV1D):
            t = t.T
        elif arch == "llama" and ".self_attn.q_proj." in name:
            t = permute(t, heads)
        elif arch == "llama" and ".self_attn.k_proj." in name:
            t = permute(t, kv_heads)
        elif arch.startswith("gemma") and name.endswith("norm.weight"):
            t = t + np.float32(1)
        t = np.ascontiguousarray(t, dtype=np.float16 if f16 and t.ndim == 2 else np.float32)
        gname = names.get_name(name, try_suffixes=(".weight", ".bias")) if names else \
            gguf_name(name, gpt2)
        w.add_tensor(gname, t)
    write_gguf(w)


if __name__ == "__main__":
    main()
