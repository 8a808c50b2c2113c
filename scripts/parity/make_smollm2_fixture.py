#!/usr/bin/env python3
"""Reference logits of SmolLM2-135M-Instruct (Q4_1 GGUF) from transformers, which dequantizes the
GGUF file to f32 (gguf_file=), for tests/parity/smollm2/. The prompt is tokenized by transformers'
tokenizer from the same file; greedy decoding for STEPS tokens, teacher-free (the model's own picks).

Writes tests/parity/smollm2/fixture.txt, lines:
  prompt ID ID ...
  greedy ID ID ...              (STEPS tokens)
  row P ID:LOGIT ... | I:LOGIT ...  one per evaluated position: the top 32 logits, then every
                                 491st vocabulary entry (a sample of the whole row)
Usage: make_smollm2_fixture.py MODEL.gguf OUT_DIR"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

STEPS = 32
PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def main():
    path, out = sys.argv[1], sys.argv[2]
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    seq = list(ids)
    rows = []
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0]
        for p in range(len(seq)):
            rows.append((p, logits[p]))
        greedy = []
        for _ in range(STEPS):
            nxt = int(torch.argmax(logits[-1]))
            greedy.append(nxt)
            seq.append(nxt)
            logits = model(torch.tensor([seq])).logits[0]
            rows.append((len(seq) - 1, logits[-1]))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "fixture.txt"), "w") as fh:
        fh.write("prompt " + " ".join(map(str, ids)) + "\n")
        fh.write("greedy " + " ".join(map(str, greedy)) + "\n")
        for p, row in rows[:-1]:  # the last row's pick is not in the greedy list
            top = torch.topk(row, 32)
            parts = [f"{int(i)}:{float(v):.6f}" for v, i in zip(top.values, top.indices)]
            sample = [f"{i}:{float(row[i]):.6f}" for i in range(0, row.shape[0], 491)]
            fh.write(f"row {p} " + " ".join(parts) + " | " + " ".join(sample) + "\n")
    print("prompt", len(ids), "tokens; greedy:", tok.decode(greedy))


if __name__ == "__main__":
    main()
