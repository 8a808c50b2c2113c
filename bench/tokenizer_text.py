#!/usr/bin/env python3
"""Writes about N bytes (default 1 MB) of mixed text, deterministically: English prose, C and
Python code, Chinese and Japanese, Russian, emoji (with ZWJ sequences), numbers and whitespace
runs, in paragraphs drawn by a seeded PRNG. usage: tokenizer_text.py OUT [BYTES]"""
import random
import sys

PROSE = ("The quick brown fox jumps over the lazy dog. It's a truth universally acknowledged "
         "that a single man in possession of a good fortune must be in want of a wife. We'll "
         "see; they've said they'd come by 3:45 p.m. on Tuesday, 12 March 2024.").split()
CODE = ["for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n}\n",
        "def encode(self, text: str) -> list[int]:\n    return [self.vocab[w] for w in text.split()]\n",
        "    if (rc != 0) {\n        fprintf(stderr, \"error: %s\\n\", msg);\n        return -1;\n    }\n",
        "const x = arr.map((v, k) => v ** 2 + k);  // squares\n",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n"]
CJK = ["我想在苹果公司工作", "今天天气很好，我们去公园散步吧。", "東京は日本の首都です。",
       "機械学習とニューラルネットワーク", "大型语言模型的分词器"]
RU = ["Привет, как дела?", "нещо на Български", "Съешь же ещё этих мягких французских булок."]
EMOJI = ["🦙", "🚀", "😶‍🌫️", "👩‍💻", "✅", "🎉🎉", "🇫🇷", "😁"]


def paragraph(rng):
    kind = rng.random()
    if kind < 0.45:
        words = [rng.choice(PROSE) for _ in range(rng.randint(20, 80))]
        return " ".join(words) + "\n\n"
    if kind < 0.70:
        return "".join(rng.choice(CODE) for _ in range(rng.randint(1, 4))) + "\n"
    if kind < 0.85:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(2, 8))) + "\n"
    if kind < 0.93:
        return " ".join(rng.choice(RU) for _ in range(rng.randint(2, 6))) + "\n"
    parts = []
    for _ in range(rng.randint(5, 20)):
        r = rng.random()
        parts.append(rng.choice(EMOJI) if r < 0.5 else str(rng.randint(0, 10 ** rng.randint(1, 9)))
                     if r < 0.8 else " " * rng.randint(2, 9))
    return " ".join(parts) + "\n"


def main():
    out, size = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    rng = random.Random(20241202)
    chunks, n = [], 0
    while n < size:
        p = paragraph(rng).encode("utf-8")
        chunks.append(p)
        n += len(p)
    data = b"".join(chunks)[:size]
    while data and (data[-1] & 0xC0) == 0x80:  # never cut a character
        data = data[:-1]
    if data and data[-1] >= 0xC0:
        data = data[:-1]
    open(out, "wb").write(data)


if __name__ == "__main__":
    main()
