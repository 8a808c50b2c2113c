#!/usr/bin/env python3
"""Builds the LoRA parity fixtures: a PEFT adapter (rank 4, random A and B from a fixed seed) on
each committed tiny base model (tests/parity/gpt2, tests/parity/llama, loaded with
from_pretrained so the base weights are exactly the committed ones), and what PEFT's PeftModel
computes with it (the base fixture's prompt, 32 greedy tokens and the logits of every step, CPU
float32). Needs torch, transformers and peft.

usage: make_lora_fixtures.py OUT_DIR [--base-dir tests/parity] [--n-gen 32] [--tar FILE]

Each fixture folder OUT_DIR/NAME (gpt2_lora, llama_lora) holds
  adapter_config.json         as PeftModel.save_pretrained wrote it
  adapter_model.safetensors   likewise (base_model.model.<module>.lora_{A,B}.weight)
  base                        the base fixture's folder name, a sibling (config.json and weights
                              are read from there, not copied)
  prompt.txt, tokens.txt, logits.f32, fixture.json
                              as in scripts/parity/make_fixtures.py (parity-compare reads them)
--tar FILE also packs OUT_DIR's fixture folders into one tar (for copying them off a machine).

fixture.json lists how far the logits move when the adapter is applied wrongly (left out, half
its scale, one target module skipped): each must be far above the fp32 tolerance (1e-4), or the
fixture could not catch that mistake.
"""
import argparse
import json
import os
import shutil
import sys
import tarfile

import numpy as np
import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (fixture_checks, forced, greedy, make_each, rel_err,  # noqa: E402
                           seq_rel_err, write_fixture_json, write_run)

TOL_FP32 = 1e-4
RANK, ALPHA = 4, 8

FIXTURES = [
    # name, base fixture, seed, LoraConfig arguments, (label, module suffix) to skip for sensitivity
    ("gpt2_lora", "gpt2", 4321,
     dict(target_modules=["c_attn", "c_proj"], fan_in_fan_out=True), ("mlp.c_proj", "mlp.c_proj")),
    ("llama_lora", "llama", 8765,
     dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], fan_in_fan_out=False),
     ("o_proj", "o_proj")),
]


def randomise_adapter(model, seed):
    """A ~ N(0, 1/in), B ~ N(0, 0.25/r), from one seeded generator in parameter order: with
    s = lora_alpha / r = 2 the update s B A is about as large as the base weight's entries (not a
    no-op, and orientation or scale mistakes show)."""
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name:
                v = torch.randn(p.shape, generator=g, dtype=torch.float64) / np.sqrt(p.shape[1])
            elif ".lora_B." in name:
                v = 0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64) / np.sqrt(p.shape[1])
            else:
                continue
            p.copy_(v.to(p.dtype))
            n += 1
    if n == 0:
        raise SystemExit("make_lora_fixtures: the PEFT model has no lora_A/lora_B parameters")
    return n


def lora_layers(model):
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, peft.tuners.lora.LoraLayer)]


@torch.no_grad()
def with_scaling(model, factor, suffix, prompt, tokens):
    """Forced logits with the scaling of the LoRA layers whose name ends in `suffix` (all when
    None) multiplied by factor; restored afterwards."""
    saved = []
    for name, m in lora_layers(model):
        if suffix is None or name.endswith(suffix):
            saved.append((m, dict(m.scaling)))
            for k in m.scaling:
                m.scaling[k] *= factor
    if not saved:
        raise SystemExit(f"make_lora_fixtures: no LoRA layer ends in {suffix}")
    try:
        return forced(model, prompt, tokens)
    finally:
        for m, s in saved:
            m.scaling.update(s)


def load_peft(base_path, cfg_kw, seed, dtype):
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype).eval()
    cfg = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, bias="none",
                     init_lora_weights=False, task_type="CAUSAL_LM", **cfg_kw)
    model = get_peft_model(base, cfg).to(dtype)
    n = randomise_adapter(model, seed)
    return model.eval(), n


def make(out_dir, base_dir, name, base_name, seed, cfg_kw, skip, n_gen):
    base_path = os.path.join(base_dir, base_name)
    with open(os.path.join(base_path, "prompt.txt")) as f:
        prompt = [int(x) for x in f.read().strip().split(",")]
    model, n_lora = load_peft(base_path, cfg_kw, seed, torch.float32)

    tokens, rows = greedy(model, prompt, n_gen)
    frows = forced(model, prompt, tokens)
    cache_vs_forward = seq_rel_err(rows, frows)
    m64, _ = load_peft(base_path, cfg_kw, seed, torch.float64)
    fp32_vs_fp64 = seq_rel_err(rows, forced(m64, prompt, tokens))

    with model.disable_adapter():
        base_rows = forced(model, prompt, tokens)
    sens = {
        "no adapter (the base model)": seq_rel_err(base_rows, frows),
        "scale lora_alpha / (2 r)": seq_rel_err(with_scaling(model, 0.5, None, prompt, tokens),
                                                frows),
        f"{skip[0]} not adapted": seq_rel_err(with_scaling(model, 0.0, skip[1], prompt, tokens),
                                              frows),
    }
    with open(os.path.join(base_path, "tokens.txt")) as f:
        base_tokens = [int(x) for x in f.read().split()]

    path = os.path.join(out_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path)
    for extra in ("README.md",):  # PEFT writes a model card; nothing reads it
        if os.path.exists(os.path.join(path, extra)):
            os.remove(os.path.join(path, extra))
    with open(os.path.join(path, "base"), "w") as f:
        f.write(base_name + "\n")
    write_run(path, prompt, tokens, rows)
    with open(os.path.join(path, "adapter_config.json")) as f:
        acfg = json.load(f)

    info = {
        "name": name, "base": base_name, "seed": seed,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__,
        "r": RANK, "lora_alpha": ALPHA, "target_modules": acfg.get("target_modules"),
        "fan_in_fan_out": acfg.get("fan_in_fan_out"), "n_lora_tensors": n_lora,
        "n_lora_layers": len(lora_layers(model)),
        "prompt": prompt, "tokens": tokens, "n_gen": n_gen,
        "tokens_differing_from_base": sum(a != b for a, b in zip(tokens, base_tokens)),
        **fixture_checks(path, rows, cache_vs_forward, fp32_vs_fp64),
        "sensitivity_rel_err": sens,
    }
    write_fixture_json(path, info)
    files = info["files"]
    print(f"  {name}: base {base_name}, {info['n_lora_layers']} LoRA layers, targets "
          f"{info['target_modules']}, tokens {tokens[:8]}... ({info['tokens_differing_from_base']}"
          f"/{n_gen} differ from the base), cache-vs-forward {cache_vs_forward:.2e}, "
          f"fp32-vs-fp64 {fp32_vs_fp64:.2e}, min margin {info['min_top2_margin_rel']:.2e}")
    print(f"  {name}: sensitivity " + ", ".join(f"{k}: {v:.2e}" for k, v in sens.items()))
    print(f"  {name}: files {files}")
    weak = [k for k, v in sens.items() if not v > 100 * TOL_FP32]
    if weak:
        print(f"  {name}: WARNING: weakly tested (< 1e-2): {weak}")
    if cache_vs_forward > 1e-5 or fp32_vs_fp64 > 1e-5:
        raise SystemExit(f"make_lora_fixtures: {name}: PEFT disagrees with itself")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--base-dir", default=os.path.join(here, "..", "..", "tests", "parity"))
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--tar")
    a = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"make_lora_fixtures: torch {torch.__version__}, transformers "
          f"{transformers.__version__}, peft {peft.__version__}, CPU float32")
    failed = make_each("make_lora_fixtures", FIXTURES,
                       lambda *fx: make(a.out_dir, a.base_dir, *fx, a.n_gen))
    if a.tar:
        with tarfile.open(a.tar, "w") as t:
            for name, *_ in FIXTURES:
                if os.path.isdir(os.path.join(a.out_dir, name)):
                    t.add(os.path.join(a.out_dir, name), arcname=name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
