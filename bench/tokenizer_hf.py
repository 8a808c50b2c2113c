#!/usr/bin/env python3
"""Hugging Face tokenizers' encoding speed on the same text, one thread (RAYON_NUM_THREADS=1):
impl=hf is one encode call on the whole text (the same ids as gplan's, compared by an FNV checksum
of the ids); impl=hf-lines is encode_batch over the text's lines, HF's faster way (its ids differ
where a pre-tokenizer match would span a line end). usage: tokenizer_hf.py TOKENIZER_JSON TEXT
[REPEATS]"""
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402


def main():
    path, text_path = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    t0 = time.perf_counter()
    tk = Tokenizer.from_file(path)
    load = time.perf_counter() - t0
    data = open(text_path, "rb").read()
    text = data.decode("utf-8")
    best, ids = 1e30, []
    for _ in range(reps):
        a = time.perf_counter()
        ids = tk.encode(text, add_special_tokens=False).ids
        best = min(best, time.perf_counter() - a)
    report("hf", data, ids, best, load)
    lines = text.splitlines(keepends=True)
    best = 1e30
    for _ in range(reps):
        a = time.perf_counter()
        enc = tk.encode_batch(lines, add_special_tokens=False)
        best = min(best, time.perf_counter() - a)
    report("hf-lines", data, [i for e in enc for i in e.ids], best, load)


def report(impl, data, ids, best, load):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    print(f"impl={impl} bytes={len(data)} ids={len(ids)} best_s={best:.4f} "
          f"mb_s={len(data) / 1e6 / best:.2f} load_s={load:.3f} fnv={h:016x}", flush=True)


if __name__ == "__main__":
    main()
