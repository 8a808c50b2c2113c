#!/usr/bin/env python3
"""Builds the Hugging Face parity fixtures: tiny random GPT2LMHeadModel, LlamaForCausalLM (plain and
with Llama 3 rope scaling), Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM,
Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM
and GptOssForCausalLM checkpoints
saved with save_pretrained, and what transformers computes for them (a prompt, 32
greedy tokens and the logits of every step). Needs torch and transformers (run it where they are).

usage: make_fixtures.py OUT_DIR [--n-gen 32] [--only NAME[,NAME...]]

Each fixture folder OUT_DIR/NAME holds
  config.json            as save_pretrained wrote it
  model.safetensors      or model.safetensors.index.json + shards (llama_tied)
  prompt.txt             the prompt ids, comma-separated (gplan-run --prompt-ids)
  tokens.txt             the greedy tokens, space-separated (what gplan-run prints)
  logits.f32             [n_gen, vocab] little-endian float32: row s holds the logits that chose
                         token s (what gplan-run --logits-out writes for a one-eval prompt)
  fixture.json           what was made and how: versions, sizes, checks and sensitivities
  config_v4.json         gemma3 only: config.json in transformers 4's keys (rope_theta,
                         rope_local_base_freq, rope_scaling, sliding_window_pattern)

Relative error of a step (the same definition as tests/parity/compare.c):
  rel(a, b) = max_i |a_i - b_i| / max_i |b_i|, b the transformers row; a run's error is the max over
  its steps.

Weights are random (fixed seeds) and deliberately not the library's default initialisation: every
bias and norm weight is non-trivial, so ignoring one of them shows, and attention is peaked enough
for rotary or masking mistakes to move the logits well past the tolerance. fixture.json lists, for
each parameter the tests rely on (eps, rope_theta, GELU form, ...), how far the logits move when
that parameter is changed: each must be far above the fp32 tolerance (1e-4) or the fixture could
not catch a mistake in it.
"""
import argparse
import json
import math
import os
import shutil
import sys
import traceback

import numpy as np
import torch
import transformers
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GPT2Config, GPT2LMHeadModel, GptOssConfig, GptOssForCausalLM,
                          LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

TOL_FP32 = 1e-4


def rel_err(a, b):
    """max|a - b| / max|b| over one row (the definition of tests/parity/compare.c)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def seq_rel_err(a, b):
    return max(rel_err(x, y) for x, y in zip(a, b))


# ---- the models ----------------------------------------------------------------------------------

def gpt2_config(**over):
    kw = dict(vocab_size=384, n_positions=64, n_embd=48, n_layer=2, n_head=3,
              layer_norm_epsilon=5e-3, activation_function="gelu_new",
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    kw.update(over)
    return GPT2Config(**kw)


def llama_config(**over):
    # Grouped-query attention (4 query heads over 2 KV heads), rope_theta and rms_norm_eps off
    # their defaults (10000, 1e-6), untied LM head.
    return llama_cfg(dict(vocab_size=256, hidden_size=64, intermediate_size=160,
                          num_key_value_heads=2, rms_norm_eps=5e-3, rope_theta=500000.0,
                          tie_word_embeddings=False), over)


# What both Llama fixtures share: 2 layers of 4 query heads, no biases, SiLU, no special tokens.
LLAMA_COMMON = dict(num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                    attention_bias=False, mlp_bias=False, hidden_act="silu",
                    bos_token_id=None, eos_token_id=None, pad_token_id=None)


def llama_cfg(sizes, over):
    """LlamaConfig of LLAMA_COMMON, sizes and then over, with rope_theta set whether this
    transformers keeps it at the top level (4.x) or in rope_parameters (5.x); check_config verifies
    what the model computes with."""
    kw = dict(LLAMA_COMMON, **sizes)
    kw.update(over)
    cfg = LlamaConfig(**kw)
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp.get("rope_theta") != kw["rope_theta"]:
        rp["rope_theta"] = kw["rope_theta"]
    return cfg


def llama_tied_config(**over):
    # Multi-query attention (4 query heads, 1 KV head), head_dim 8, odd sizes, tied LM head.
    return llama_cfg(dict(vocab_size=320, hidden_size=32, intermediate_size=80,
                          num_key_value_heads=1, rms_norm_eps=2e-3, rope_theta=1000.0,
                          tie_word_embeddings=True), over)


# The newer families: the same sizes as llama, each with what sets it apart.
DECODER_COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      hidden_act="silu", bos_token_id=None, eos_token_id=None, pad_token_id=None)


def rope_cfg(cls, kw):
    """cls(**kw) with rope_theta (and a rope_type's parameters, kw["rope_parameters"]) set where
    this transformers keeps them (see llama_cfg)."""
    rp_want = dict(kw.pop("rope_parameters", None) or {})
    cfg = cls(**kw)
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        rp.update(rp_want)
        rp["rope_theta"] = kw["rope_theta"]
    elif rp_want:
        cfg.rope_scaling = rp_want
    return cfg


def qwen2_config(**over):
    # q, k and v biases (every Qwen2), tied LM head (as Qwen2.5-0.5B..3B).
    kw = dict(DECODER_COMMON, rms_norm_eps=5e-3, rope_theta=100000.0, tie_word_embeddings=True,
              use_sliding_window=False)
    kw.update(over)
    return rope_cfg(Qwen2Config, kw)


def qwen3_config(**over):
    # Per-head RMSNorm of q and k, head_dim 24 independent of hidden_size / heads (16), untied.
    kw = dict(DECODER_COMMON, head_dim=24, rms_norm_eps=5e-3, rope_theta=1000000.0,
              tie_word_embeddings=False, attention_bias=False, use_sliding_window=False)
    kw.update(over)
    return rope_cfg(Qwen3Config, kw)


# The mixtures of experts: 8 experts of 32, 2 a token, on the families' 64-wide block. The
# routing's margins (the k-th against the next probability) are recorded in fixture.json and
# must be clear of ties, whose order torch.topk leaves unspecified.
MOE_COMMON = dict(DECODER_COMMON, head_dim=16, rms_norm_eps=5e-3, tie_word_embeddings=False,
                  num_experts_per_tok=2)


def moe_eager(cfg):
    """The experts' loop as the modeling file writes it (one expert at a time; runs in float64
    too, which the grouped-product implementation does not)."""
    cfg._experts_implementation = "eager"
    return cfg


def qwen3moe_config(**over):
    # Qwen3-MoE: qwen3's q and k norms, every layer MoE (decoder_sparse_step 1, no
    # mlp_only_layers), the top 2 renormalised (norm_topk_prob, as Qwen3-30B-A3B).
    kw = dict(MOE_COMMON, rope_theta=1000000.0, num_experts=8, moe_intermediate_size=32,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
              attention_bias=False, use_sliding_window=False)
    kw.update(over)
    return moe_eager(rope_cfg(Qwen3MoeConfig, kw))


def mixtral_config(**over):
    # Mixtral: mistral's attention (no window, as Mixtral-8x7B), experts of intermediate_size.
    kw = dict(MOE_COMMON, rope_theta=1000000.0, num_local_experts=8, intermediate_size=32,
              sliding_window=None, router_jitter_noise=0.0)
    kw.update(over)
    return moe_eager(rope_cfg(MixtralConfig, kw))


# gpt-oss: attention sinks, q/k/v/o biases, sliding and full layers alternating (layer_types),
# YaRN rope (truncate false, as gpt-oss; original_max_position_embeddings 256 puts the ramp over
# pairs 0..3 of head_dim 16's 8), the router's bias, the experts' biases and the clamped SwiGLU at
# a limit the random products pass (1.5; gpt-oss's is 7). Sliding window 5 of the fixture's 41
# positions.
GPT_OSS_YARN = dict(rope_type="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                    original_max_position_embeddings=256)


def gpt_oss_config(**over):
    kw = dict(MOE_COMMON, rope_theta=10000.0, num_local_experts=8, intermediate_size=32,
              sliding_window=5, layer_types=["sliding_attention", "full_attention"],
              attention_bias=True, swiglu_limit=1.5, router_aux_loss_coef=0.0,
              rope_parameters=dict(GPT_OSS_YARN))
    kw.pop("hidden_act", None)
    kw.update(over)
    cfg = moe_eager(rope_cfg(GptOssConfig, kw))
    cfg._attn_implementation = "eager"  # the sinks in the softmax as the modeling file writes it
    return cfg


def llama3_config(**over):
    # Llama 3.x rope scaling: with theta 10000, head_dim 16 and original_max_position_embeddings 32
    # the wavelengths 2 pi / freq are 6.3 (< 32 / 4: kept), 19.9 (between: smoothed) and 63 and
    # more (> 32 / 1: divided by factor), so each branch shows. head_dim 16 with hidden 48, tied.
    kw = dict(DECODER_COMMON, hidden_size=48, head_dim=16, rms_norm_eps=5e-3, rope_theta=10000.0,
              tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
              rope_parameters=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                   high_freq_factor=4.0, original_max_position_embeddings=32))
    kw.update(over)
    return rope_cfg(LlamaConfig, kw)


def mistral_config(**over):
    # Sliding-window attention over 5 rows: the prompt (9) and the 32 steps run well past it.
    kw = dict(DECODER_COMMON, head_dim=16, rms_norm_eps=5e-3, rope_theta=10000.0,
              tie_word_embeddings=False, sliding_window=5)
    kw.update(over)
    return rope_cfg(MistralConfig, kw)


def phi3_config(**over):
    # Fused qkv_proj and gate_up_proj, a sliding window of 6 (Phi-3-mini's configs set 2047).
    kw = dict(DECODER_COMMON, rms_norm_eps=5e-3, rope_theta=10000.0, tie_word_embeddings=False,
              sliding_window=6, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
              original_max_position_embeddings=64)
    kw.update(over)
    return rope_cfg(Phi3Config, kw)


def gemma2_config(**over):
    # Gemma 2: (1 + w) norms before and after attention and MLP, GELU-tanh gated MLP, embeddings
    # times sqrt(hidden), query_pre_attn_scalar 24 (not head_dim 16), scores soft-capped at 4 and
    # logits at 3 (both well inside the ranges the weights give), sliding window 4 on layer 0
    # (layer_types: even layers local), tied. Eager attention: the one that soft-caps.
    kw = dict(DECODER_COMMON, head_dim=16, rms_norm_eps=5e-3, rope_theta=10000.0,
              tie_word_embeddings=True, query_pre_attn_scalar=24, attn_logit_softcapping=4.0,
              final_logit_softcapping=3.0, sliding_window=4, hidden_activation="gelu_pytorch_tanh")
    kw.update(over)
    cfg = rope_cfg(Gemma2Config, kw)
    cfg._attn_implementation = "eager"
    return cfg


# Gemma 3's fixture: 4 layers, a global one every 3 (layer_types local, local, global, local).
GEMMA3_PATTERN = 3
GEMMA3_LAYERS = 4


def gemma3_rope(theta=50000.0, rope_type="linear", factor=4.0, local_theta=1000.0):
    """transformers 5's rope_parameters for Gemma 3: the global layers' (full_attention) and the
    local layers' (sliding_attention) rope, each with its own theta."""
    full = dict(rope_type=rope_type, rope_theta=theta)
    if rope_type == "linear":
        full["factor"] = factor
    return dict(full_attention=full,
                sliding_attention=dict(rope_type="default", rope_theta=local_theta))


def gemma3_layer_types(pattern=GEMMA3_PATTERN, n=GEMMA3_LAYERS):
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]


def gemma3_config(**over):
    # Gemma 3: Gemma 2's block with per-head (1 + w) q and k norms and no soft-capping; local
    # layers (window 4, rope theta 1000 unscaled) and a global one (layer 2: theta 50000, linear
    # scaling by 4), none of them the defaults (10000; 1e6 and 8 in the 4B+ configs). The layers
    # are given as layer_types, as transformers 5 writes them (config.json has no
    # sliding_window_pattern); config_v4.json holds the same model in transformers 4's keys.
    kw = dict(DECODER_COMMON, num_hidden_layers=GEMMA3_LAYERS, head_dim=16, rms_norm_eps=5e-3,
              tie_word_embeddings=True, query_pre_attn_scalar=24, sliding_window=4,
              hidden_activation="gelu_pytorch_tanh", layer_types=gemma3_layer_types(),
              rope_parameters=gemma3_rope())
    kw.pop("hidden_act")
    kw.update(over)
    cfg = Gemma3TextConfig(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def gemma3_v4_config(saved):
    """The fixture's config.json (transformers 5) in transformers 4's keys: rope_theta,
    rope_local_base_freq and rope_scaling at the top level, sliding_window_pattern instead of
    layer_types."""
    v4 = {k: v for k, v in saved.items()
          if k not in ("rope_parameters", "layer_types", "_sliding_window_pattern")}
    rp = saved["rope_parameters"]
    full = rp["full_attention"]
    v4["rope_theta"] = full["rope_theta"]
    v4["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    v4["rope_scaling"] = ({"rope_type": full["rope_type"], "factor": full["factor"]}
                          if full["rope_type"] != "default" else None)
    v4["sliding_window_pattern"] = GEMMA3_PATTERN
    v4["transformers_version"] = "4.57.6"
    return v4


FAMILIES = {
    "gemma3": (gemma3_config, Gemma3ForCausalLM),
    "gemma2": (gemma2_config, Gemma2ForCausalLM),
    "phi3": (phi3_config, Phi3ForCausalLM),
    "qwen2": (qwen2_config, Qwen2ForCausalLM),
    "qwen3": (qwen3_config, Qwen3ForCausalLM),
    "llama3": (llama3_config, LlamaForCausalLM),
    "mistral": (mistral_config, MistralForCausalLM),
    "qwen3moe": (qwen3moe_config, Qwen3MoeForCausalLM),
    "mixtral": (mixtral_config, MixtralForCausalLM),
    "gpt_oss": (gpt_oss_config, GptOssForCausalLM),
}


# Gemma 3 scales its embeddings by sqrt(hidden_size) and ties its head: at 0.25 the token's own
# embedding dominates the residual stream and greedy decoding repeats one token (as gemma2's
# fixture does); at 0.1 its 32 tokens are 17 different ones.
EMB_STD = {"gemma3": 0.1}


def randomise(model, seed, emb_std):
    """Overwrites every parameter from one seeded generator (tied tensors are visited once)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            is_norm = p.ndim == 1 and ("ln" in name or "norm" in name)
            if is_norm and name.endswith("weight"):
                v = 1.0 + 0.2 * r
            elif name.endswith("bias"):
                v = 0.1 * r
            elif "wte" in name or "wpe" in name or "embed_tokens" in name:
                v = emb_std * r
            elif name.endswith(".sinks"):  # gpt-oss: a logit a head, near the scores' size
                v = 1.0 * r
            elif p.ndim == 3 and isinstance(model, GptOssForCausalLM):
                # gpt-oss's experts [E, in, out] (gate_up_proj [E, H, 2F], down_proj [E, F, H])
                v = 1.5 / math.sqrt(p.shape[1]) * r
            elif p.ndim == 2:
                # GPT-2's Conv1D stores [in, out]; nn.Linear stores [out, in].
                conv1d = isinstance(model, GPT2LMHeadModel)
                fan_in = p.shape[0] if conv1d else p.shape[1]
                gain = 4.0 if name.startswith("lm_head") else 1.5
                v = gain / math.sqrt(fan_in) * r
            elif p.ndim == 3 and ".experts." in name:
                # a mixture's experts stacked [E, out, in] (gate_up_proj, down_proj)
                v = 1.5 / math.sqrt(p.shape[2]) * r
            else:
                raise SystemExit(f"make_fixtures: no rule for parameter {name} {tuple(p.shape)}")
            p.copy_(v.to(p.dtype))


def build(kind, seed, **over):
    torch.manual_seed(seed)
    if kind == "gpt2":
        m = GPT2LMHeadModel(gpt2_config(**over))
        randomise(m, seed, emb_std=0.25)
    elif kind == "llama":
        m = LlamaForCausalLM(llama_config(**over))
        randomise(m, seed, emb_std=0.25)
    elif kind in FAMILIES:
        cfg_fn, cls = FAMILIES[kind]
        m = cls(cfg_fn(**over))
        randomise(m, seed, emb_std=EMB_STD.get(kind, 0.25))
    else:
        m = LlamaForCausalLM(llama_tied_config(**over))
        randomise(m, seed, emb_std=0.4)
    return m.float().eval()


def clone_with(kind, base, **over):
    """The same weights under a changed config (for the sensitivity table)."""
    m = build(kind, 0, **over)
    missing, unexpected = m.load_state_dict(base.state_dict(), strict=False)
    if [k for k in missing if not k.endswith("attn.bias")]:
        raise SystemExit(f"make_fixtures: sensitivity clone misses {missing}")
    return m.eval()


# ---- what transformers computes ------------------------------------------------------------------

@torch.no_grad()
def greedy(model, prompt, n_gen):
    """Prompt in one forward, then one token per forward over the KV cache: the same evals as
    gplan-run. Returns the tokens and the logits row that chose each of them. Keyword input_ids, so
    a PeftModel takes the same call (make_lora_fixtures.py uses these helpers too)."""
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    past = out.past_key_values
    row = out.logits[0, -1]
    tokens, rows = [], []
    for step in range(n_gen):
        rows.append(row.double().numpy().copy())
        tok = int(torch.argmax(row))
        tokens.append(tok)
        if step == n_gen - 1:
            break
        out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        row = out.logits[0, -1]
    return tokens, rows


@torch.no_grad()
def forced(model, prompt, tokens):
    """Logits rows for the steps, from one forward over prompt + tokens[:-1] (no cache)."""
    seq = prompt + tokens[:-1]
    logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].double().numpy()
    return [logits[len(prompt) - 1 + s] for s in range(len(tokens))]


def min_margin(rows):
    """Smallest (top-1 - top-2) / max|row| over the steps: how close greedy came to a tie."""
    m = 1e9
    for r in rows:
        s = np.sort(r)
        m = min(m, float((s[-1] - s[-2]) / np.max(np.abs(r))))
    return m


def check_config(kind, model, cfg_kw):
    """Makes sure transformers took the parameters the fixture claims (API drift guard)."""
    try:
        check_config_values(kind, model, cfg_kw)
    except AttributeError as e:  # a renamed attribute: the sensitivity table still shows it
        print(f"  WARNING: could not check the config of {kind} on the model: {e}")


def check_config_values(kind, model, cfg_kw):
    if kind == "gpt2":
        eps = model.transformer.ln_f.eps
        assert abs(eps - cfg_kw["layer_norm_epsilon"]) < 1e-12, eps
        return
    if kind == "gemma3":  # a rope for each layer type
        rot, d = model.model.rotary_emb, model.config.head_dim
        ex = -np.arange(0, d, 2, dtype=np.float64) / d
        theta, factor, local = cfg_kw["gemma3_rope"]
        assert np.allclose(rot.full_attention_inv_freq.double().numpy(), theta ** ex / factor,
                           rtol=1e-6)
        assert np.allclose(rot.sliding_attention_inv_freq.double().numpy(), local ** ex, rtol=1e-6)
        assert model.config.layer_types == gemma3_layer_types(), model.config.layer_types
        assert model.config.sliding_window == cfg_kw["sliding_window"]
        assert model.config.final_logit_softcapping is None
        assert model.config.attn_logit_softcapping is None
        assert abs(model.model.norm.eps - cfg_kw["rms_norm_eps"]) < 1e-12
        tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        assert tied == cfg_kw["tie_word_embeddings"], tied
        return
    theta = cfg_kw["rope_theta"]
    inv = model.model.rotary_emb.inv_freq.double().numpy()
    d = getattr(model.config, "head_dim", None) or \
        model.config.hidden_size // model.config.num_attention_heads
    want = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if "yarn" in cfg_kw:  # YaRN (docs/language.md, rope), written out again here
        factor, beta_fast, beta_slow, orig, truncate = cfg_kw["yarn"]

        def corr(beta):
            return d * math.log(orig / (beta * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = corr(beta_fast), corr(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        r = np.clip((np.arange(d // 2) - lo) / (hi - lo), 0, 1)
        want = want / factor * r + want * (1 - r)
        att = model.model.rotary_emb.attention_scaling
        assert abs(att - (0.1 * math.log(factor) + 1)) < 1e-12, att
    if "llama3" in cfg_kw:  # the scaling of docs/language.md (rope), written out again here
        factor, lo, hi, orig = cfg_kw["llama3"]
        wl = 2 * math.pi / want
        s = (orig / wl - lo) / (hi - lo)
        want = np.where(wl < orig / hi, want,
                        np.where(wl > orig / lo, want / factor, (1 - s) * want / factor + s * want))
    assert np.allclose(inv, want, rtol=1e-6), (inv, want)
    if "sliding_window" in cfg_kw:
        assert model.config.sliding_window == cfg_kw["sliding_window"], model.config.sliding_window
    if "rms_norm_eps" in cfg_kw:
        eps = model.model.norm.variance_epsilon
        assert abs(eps - cfg_kw["rms_norm_eps"]) < 1e-12, eps
    if "moe" in cfg_kw:
        n_exp, k, norm = cfg_kw["moe"]
        for r in routers(model):
            assert r.weight.shape[0] == n_exp and r.top_k == k, (r.weight.shape, r.top_k)
            assert getattr(r, "norm_topk_prob", True) == norm
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied == cfg_kw["tie_word_embeddings"], tied


# ---- the fixtures --------------------------------------------------------------------------------

FIXTURES = [
    # name, kind, seed, prompt length, shard size (None: one model.safetensors)
    ("gpt2", "gpt2", 1234, 7, None),
    ("llama", "llama", 5678, 9, None),
    ("llama_tied", "llama_tied", 91011, 5, "60KB"),
    ("qwen2", "qwen2", 2468, 9, None),
    ("qwen3", "qwen3", 1357, 9, None),
    ("llama3", "llama3", 8642, 9, None),
    ("mistral", "mistral", 9753, 9, None),
    ("phi3", "phi3", 3141, 9, None),
    ("gemma2", "gemma2", 2718, 9, None),
    ("gemma3", "gemma3", 2025, 9, None),
    ("qwen3moe", "qwen3moe", 4242, 9, None),
    ("mixtral", "mixtral", 8787, 9, None),
    ("gpt_oss", "gpt_oss", 16, 9, None),
]

SENSITIVITY = {
    # parameter changes the fixture must be able to tell apart from the real one
    "gpt2": [("layer_norm_epsilon=1e-5", dict(layer_norm_epsilon=1e-5)),
             ("activation_function=gelu (erf)", dict(activation_function="gelu"))],
    "llama": [("rope_theta=10000", dict(rope_theta=10000.0)),
              ("rms_norm_eps=1e-6", dict(rms_norm_eps=1e-6)),
              ("GQA grouping: query head h reads KV head h % n_kv, not h / group", None)],
    "llama_tied": [("rope_theta=10000", dict(rope_theta=10000.0)),
                   ("rms_norm_eps=1e-5", dict(rms_norm_eps=1e-5))],
    # (label, config change, state-dict change): the new families' own parts
    "qwen2": [("rope_theta=10000", dict(rope_theta=10000.0)),
              ("q, k and v biases zero", lambda sd: zero(sd, ("q_proj.bias", "k_proj.bias",
                                                              "v_proj.bias")))],
    "qwen3": [("rms_norm_eps=1e-6", dict(rms_norm_eps=1e-6)),
              ("q_norm and k_norm weights 1", lambda sd: ones(sd, ("q_norm.weight",
                                                                   "k_norm.weight")))],
    "llama3": [("rope_type default (no scaling)", dict(rope_parameters=dict(rope_type="default"))),
               ("factor=4", dict(rope_parameters=dict(
                   rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=32))),
               ("high_freq_factor=2", dict(rope_parameters=dict(
                   rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=2.0,
                   original_max_position_embeddings=32)))],
    "gemma2": [("sliding_window=64 (no window)", dict(sliding_window=64)),
               ("attn_logit_softcapping=None", dict(attn_logit_softcapping=None)),
               ("final_logit_softcapping=None", dict(final_logit_softcapping=None)),
               ("query_pre_attn_scalar=16", dict(query_pre_attn_scalar=16))],
    "gemma3": [("sliding_window=64 (no window)", dict(sliding_window=64)),
               ("rope_local_base_freq=10000", dict(rope_parameters=gemma3_rope(local_theta=1e4))),
               ("global rope_theta=1e6", dict(rope_parameters=gemma3_rope(theta=1e6))),
               ("global rope unscaled (rope_type default)",
                dict(rope_parameters=gemma3_rope(rope_type="default"))),
               ("global factor=8", dict(rope_parameters=gemma3_rope(factor=8.0))),
               ("sliding_window_pattern=2 (layers 1 and 3 global)",
                dict(layer_types=gemma3_layer_types(pattern=2))),
               ("query_pre_attn_scalar=16", dict(query_pre_attn_scalar=16)),
               ("q_norm and k_norm weights 0 (scale 1)",
                lambda sd: zero(sd, ("q_norm.weight", "k_norm.weight")))],
    "phi3": [("sliding_window=None (full attention)", dict(sliding_window=None)),
             ("rms_norm_eps=1e-6", dict(rms_norm_eps=1e-6))],
    "mistral": [("sliding_window=None (full attention)", dict(sliding_window=None)),
                ("sliding_window=6", dict(sliding_window=6))],
    "qwen3moe": [("norm_topk_prob=False", dict(norm_topk_prob=False)),
                 ("num_experts_per_tok=1", dict(num_experts_per_tok=1)),
                 ("num_experts_per_tok=3", dict(num_experts_per_tok=3)),
                 ("router rows of experts 0 and 1 swapped",
                  lambda sd: swap_rows(sd, ".gate.weight", 0, 1)),
                 ("q_norm and k_norm weights 1", lambda sd: ones(sd, ("q_norm.weight",
                                                                      "k_norm.weight")))],
    "gpt_oss": [("no sinks (each -1e4)", lambda sd: fill(sd, (".sinks",), -1e4)),
                ("rope_type default (no yarn)", dict(rope_parameters=dict(rope_type="default"))),
                ("yarn truncate=True", dict(rope_parameters=dict(GPT_OSS_YARN, truncate=True))),
                ("yarn beta_fast=8", dict(rope_parameters=dict(GPT_OSS_YARN, beta_fast=8.0))),
                ("sliding_window=64 (no window)", dict(sliding_window=64)),
                ("layer_types full, sliding (swapped)",
                 dict(layer_types=["full_attention", "sliding_attention"])),
                ("swiglu_limit=7", dict(swiglu_limit=7.0)),
                ("num_experts_per_tok=3", dict(num_experts_per_tok=3)),
                ("router bias zero", lambda sd: zero(sd, (".router.bias",))),
                ("experts' biases zero",
                 lambda sd: zero(sd, ("gate_up_proj_bias", "down_proj_bias"))),
                ("gate and up columns swapped (not interleaved)", lambda sd: swap_gate_up(sd)),
                ("q, k, v and o biases zero",
                 lambda sd: zero(sd, ("q_proj.bias", "k_proj.bias", "v_proj.bias",
                                      "o_proj.bias")))],
    "mixtral": [("num_experts_per_tok=1", dict(num_experts_per_tok=1)),
                ("num_experts_per_tok=3", dict(num_experts_per_tok=3)),
                ("router rows of experts 0 and 1 swapped",
                 lambda sd: swap_rows(sd, ".gate.weight", 0, 1))],
}


def swap_rows(sd, suffix, i, j):
    """Rows i and j of every router (in the model's names: mlp.gate.weight in transformers 5)."""
    for k in sd:
        if k.endswith(suffix):
            w = sd[k].clone()
            w[[i, j]] = w[[j, i]]
            sd[k] = w


def fill(sd, suffixes, value):
    for k in sd:
        if k.endswith(suffixes):
            sd[k] = torch.full_like(sd[k], value)


def swap_gate_up(sd):
    """gpt-oss's gate_up_proj [E, H, 2F] and its bias [E, 2F]: even and odd columns swapped."""
    for k in sd:
        if k.endswith(("gate_up_proj", "gate_up_proj_bias")):
            w = sd[k]
            sd[k] = torch.stack([w[..., 1::2], w[..., 0::2]], dim=-1).reshape(w.shape)


def zero(sd, suffixes):
    for k in sd:
        if k.endswith(suffixes):
            sd[k] = torch.zeros_like(sd[k])


def ones(sd, suffixes):
    for k in sd:
        if k.endswith(suffixes):
            sd[k] = torch.ones_like(sd[k])


# What each fixture claims transformers computes with (check_config verifies it on the model).
CLAIMED = {
    "gpt2": dict(layer_norm_epsilon=5e-3),
    "llama": dict(rope_theta=500000.0, rms_norm_eps=5e-3, tie_word_embeddings=False),
    "llama_tied": dict(rope_theta=1000.0, rms_norm_eps=2e-3, tie_word_embeddings=True),
    "qwen2": dict(rope_theta=100000.0, rms_norm_eps=5e-3, tie_word_embeddings=True),
    "qwen3": dict(rope_theta=1000000.0, rms_norm_eps=5e-3, tie_word_embeddings=False),
    "llama3": dict(rope_theta=10000.0, rms_norm_eps=5e-3, tie_word_embeddings=True,
                   llama3=(8.0, 1.0, 4.0, 32)),
    "mistral": dict(rope_theta=10000.0, rms_norm_eps=5e-3, tie_word_embeddings=False,
                    sliding_window=5),
    "phi3": dict(rope_theta=10000.0, rms_norm_eps=5e-3, tie_word_embeddings=False,
                 sliding_window=6),
    "gemma2": dict(rope_theta=10000.0, tie_word_embeddings=True, sliding_window=4),
    "gemma3": dict(gemma3_rope=(50000.0, 4.0, 1000.0), rms_norm_eps=5e-3, tie_word_embeddings=True,
                   sliding_window=4),
    "qwen3moe": dict(rope_theta=1000000.0, rms_norm_eps=5e-3, tie_word_embeddings=False,
                     moe=(8, 2, True)),
    "mixtral": dict(rope_theta=1000000.0, rms_norm_eps=5e-3, tie_word_embeddings=False,
                    moe=(8, 2, True)),
    "gpt_oss": dict(rope_theta=10000.0, rms_norm_eps=5e-3, tie_word_embeddings=False,
                    moe=(8, 2, True), sliding_window=5, yarn=(4.0, 32.0, 1.0, 256, False)),
}


def routers(model):
    """The router module of each layer (Qwen3-MoE's mlp.gate, Mixtral's block_sparse_moe.gate,
    gpt-oss's mlp.router)."""
    out = []
    for layer in model.model.layers:
        block = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe")
        out.append(getattr(block, "gate", None) or block.router)
    return out


@torch.no_grad()
def routing_stats(model, prompt, tokens, top_k):
    """Over one forward of prompt + tokens: the experts each layer's router chose (how many
    tokens each), and the smallest gap between a token's k-th and (k+1)-th router probability
    (relative to the k-th): a tie's order is torch.topk's own, so the fixture must have none."""
    seen = []

    def hook(mod, inp, out):
        h = inp[0].reshape(-1, inp[0].shape[-1])
        bias = getattr(mod, "bias", None)  # gpt-oss's router has one
        p = torch.softmax(torch.nn.functional.linear(h, mod.weight, bias).double(), dim=-1)
        seen.append(p)
    handles = [r.register_forward_hook(hook) for r in routers(model)]
    model(input_ids=torch.tensor([prompt + tokens[:-1]]), use_cache=False)
    for h in handles:
        h.remove()
    counts, margin = [], 1e9
    for p in seen:
        s = torch.sort(p, dim=-1, descending=True).values
        margin = min(margin, float(((s[:, top_k - 1] - s[:, top_k]) / s[:, top_k - 1]).min()))
        idx = torch.topk(p, top_k, dim=-1).indices.flatten()
        counts.append([int((idx == e).sum()) for e in range(p.shape[-1])])
    return counts, margin


def write_gguf(path, model):
    """model.gguf beside model.safetensors: the same f32 weights under llama.cpp's names and
    metadata for the qwen2 architecture (q and k unpermuted, as llama.cpp converts Qwen2; no
    output.weight for a tied head), for the --gguf parity test. The gguf package writes each
    numpy [out, in] array as GGUF's ne [in, out]."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(os.path.join(path, "model.gguf"), "qwen2")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    sd = model.state_dict()
    for name, t in sd.items():
        stem, kind = name.rsplit(".", 1)
        if stem == "lm_head" and cfg.tie_word_embeddings:
            continue
        if stem.startswith("model.layers."):
            _, _, l, rest = stem.split(".", 3)
            g = f"blk.{l}.{per_layer[rest]}"
        else:
            g = names[stem]
        w.add_tensor(f"{g}.{kind}", t.detach().float().numpy().copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_run(path, prompt, tokens, rows):
    """The files parity-compare reads: prompt.txt, tokens.txt and logits.f32 [steps, vocab]."""
    with open(os.path.join(path, "prompt.txt"), "w") as f:
        f.write(",".join(map(str, prompt)) + "\n")
    with open(os.path.join(path, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    np.asarray(rows, dtype="<f4").tofile(os.path.join(path, "logits.f32"))


def fixture_checks(path, rows, cache_vs_forward, fp32_vs_fp64):
    """The entries of every fixture.json (this script's and make_lora_fixtures.py's): the logits'
    layout, the error measure, the files in path and the reference's checks of itself."""
    return {
        "logits": "logits.f32: [n_gen, vocab] little-endian float32",
        "rel_err": "max_i |a_i - b_i| / max_i |b_i| per step, max over steps",
        "files": sorted(os.listdir(path)),
        "check_cache_vs_full_forward": cache_vs_forward,
        "check_fp32_vs_fp64": fp32_vs_fp64,
        "min_top2_margin_rel": min_margin(rows),
    }


def write_fixture_json(path, info):
    with open(os.path.join(path, "fixture.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def make(out_dir, name, kind, seed, n_prompt, shard, n_gen):
    model = build(kind, seed)
    kw = CLAIMED[kind]
    check_config(kind, model, kw)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(0, vocab, n_prompt)]

    tokens, rows = greedy(model, prompt, n_gen)
    frows = forced(model, prompt, tokens)
    cache_vs_forward = seq_rel_err(rows, frows)
    m64 = build(kind, seed).double()
    rows64 = forced(m64, prompt, tokens)
    fp32_vs_fp64 = seq_rel_err(rows, rows64)

    gen_tokens = None
    try:
        g = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n_gen,
                           min_new_tokens=n_gen, pad_token_id=0)
        gen_tokens = [int(t) for t in g[0, n_prompt:]]
    except Exception as e:  # a cross-check only; the manual loop is the reference
        print(f"  {name}: model.generate failed ({e}); skipped that cross-check")
    if gen_tokens is not None and gen_tokens != tokens:
        raise SystemExit(f"make_fixtures: {name}: generate() gave {gen_tokens}, loop gave {tokens}")

    sens = {}
    for label, over in SENSITIVITY[kind]:
        if callable(over):  # the same config, weights changed
            m2 = build(kind, 0)
            sd = {k: v.clone() for k, v in model.state_dict().items()}
            over(sd)
            m2.load_state_dict(sd)
            m2.eval()
        elif over is None:  # GQA: the same K/V weights, each KV head repeated for its query heads
            m2 = build(kind, 0, num_key_value_heads=model.config.num_attention_heads)
            sd = model.state_dict()
            rep = model.config.num_attention_heads // model.config.num_key_value_heads
            d = model.config.hidden_size // model.config.num_attention_heads
            for k in list(sd):
                if k.endswith("k_proj.weight") or k.endswith("v_proj.weight"):
                    w = sd[k].view(-1, d, sd[k].shape[1])
                    # a wrong grouping (head h reads KV head h % n_kv instead of h / rep)
                    sd[k] = w.repeat(rep, 1, 1).reshape(-1, sd[k].shape[1])
            m2.load_state_dict(sd)
            m2.eval()
        else:
            m2 = clone_with(kind, model, **over)
        sens[label] = seq_rel_err(forced(m2, prompt, tokens), frows)

    moe = {}
    if "moe" in kw:
        counts, margin = routing_stats(model, prompt, tokens, kw["moe"][1])
        used = [sum(1 for c in layer if c) for layer in counts]
        moe = {"moe_expert_tokens_per_layer": counts, "moe_experts_used_per_layer": used,
               "moe_min_topk_margin_rel": margin}
        if min(used) < 4 or margin < 1e-3:
            raise SystemExit(f"make_fixtures: {name}: degenerate routing: experts used {used}, "
                             f"k-th vs next margin {margin:.2e}")

    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    if shard:
        model.save_pretrained(path, max_shard_size=shard)
    else:
        model.save_pretrained(path)
    gen_cfg = os.path.join(path, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    write_run(path, prompt, tokens, rows)
    if kind == "qwen2":
        write_gguf(path, model)

    with open(os.path.join(path, "config.json")) as f:
        saved = json.load(f)
    if kind == "gemma3":
        with open(os.path.join(path, "config_v4.json"), "w") as f:
            json.dump(gemma3_v4_config(saved), f, indent=2, sort_keys=True)
            f.write("\n")
    info = {
        "name": name, "architecture": type(model).__name__, "seed": seed,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "prompt": prompt, "tokens": tokens, "n_gen": n_gen, "vocab": vocab,
        **fixture_checks(path, rows, cache_vs_forward, fp32_vs_fp64),
        "generate_agrees": gen_tokens is not None,
        "sensitivity_rel_err": sens,
        "config_top_level_rope_theta": saved.get("rope_theta"),
        "config_rope_parameters": saved.get("rope_parameters"),
        **moe,
    }
    write_fixture_json(path, info)
    files = info["files"]
    weak = [k for k, v in sens.items() if not v > 100 * TOL_FP32]
    print(f"  {name}: vocab {vocab}, prompt {len(prompt)}, tokens {tokens[:8]}..., "
          f"cache-vs-forward {cache_vs_forward:.2e}, fp32-vs-fp64 {fp32_vs_fp64:.2e}, "
          f"min margin {info['min_top2_margin_rel']:.2e}")
    print(f"  {name}: sensitivity " + ", ".join(f"{k}: {v:.2e}" for k, v in sens.items()))
    print(f"  {name}: files {files}; config rope_theta {saved.get('rope_theta')}, "
          f"rope_parameters {saved.get('rope_parameters')}")
    if moe:
        print(f"  {name}: experts used per layer {moe['moe_experts_used_per_layer']}, "
              f"min k-th margin {moe['moe_min_topk_margin_rel']:.2e}")
    if weak:
        print(f"  {name}: WARNING: weakly tested parameters (< 1e-2): {weak}")
    if cache_vs_forward > 1e-5 or fp32_vs_fp64 > 1e-5:
        raise SystemExit(f"make_fixtures: {name}: transformers disagrees with itself")


def make_each(prog, fixtures, make_one):
    """make_one(*fixture) for each fixture (its name first); a failure is reported and the others
    still made. Returns how many failed."""
    failed = 0
    for fx in fixtures:
        try:
            make_one(*fx)
        except (Exception, SystemExit) as e:  # report and go on with the other fixtures
            traceback.print_exc()
            print(f"{prog}: {fx[0]} FAILED: {e}")
            failed += 1
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"make_fixtures: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"CPU float32 (float64 for the noise floor)")
    chosen = [fx for fx in FIXTURES if not only or fx[0] in only]
    failed = make_each("make_fixtures", chosen, lambda *fx: make(a.out_dir, *fx, a.n_gen))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
