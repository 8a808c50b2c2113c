#!/usr/bin/env python3
"""Writes tests/quant/TYPE.bin: random blocks of ggml's quantized formats and the python gguf
package's dequantization of them (gguf.quants), plus, for the types the package also quantizes,
random inputs and the package's quantized bytes. tests/test_quant.c compares gplan against them
bit for bit. Run from the repository root: python3 scripts/quant/make_fixtures.py

File layout (little-endian):
  char magic[4] = "GPQF"; u32 version = 1; u32 ggml type id; u32 block elements; u32 block bytes;
  u32 nb (blocks); u32 nq (blocks of the quantize section, 0 when gguf does not quantize the type);
  u8 blocks[nb * bytes]; f32 values[nb * elements] (gguf.quants.dequantize of the blocks);
  f32 input[nq * elements]; u8 quantized[nq * bytes] (gguf.quants.quantize of the input).
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# name, type, offsets of the block's f16 fields (d, and dmin / m where present)
TYPES = [
    ("q4_0", T.Q4_0, [0]),
    ("q4_1", T.Q4_1, [0, 2]),
    ("q5_0", T.Q5_0, [0]),
    ("q5_1", T.Q5_1, [0, 2]),
    ("q8_0", T.Q8_0, [0]),
    ("q4_k", T.Q4_K, [0, 2]),
    ("q5_k", T.Q5_K, [0, 2]),
    ("q6_k", T.Q6_K, [208]),
]
QUANTIZES = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}


def sane_f16(rng, n):
    """n finite binary16 values, magnitudes 1e-5..1 (some subnormal), either sign."""
    v = np.float16(np.sign(rng.uniform(-1, 1, n)) * 10.0 ** rng.uniform(-5, 0, n))
    return v.view(np.uint8).reshape(n, 2)


def quant_input(rng, nq, qk):
    x = rng.standard_normal((nq, qk)).astype(np.float32)
    x *= np.float32(10.0) ** rng.uniform(-3, 1, (nq, 1)).astype(np.float32)
    x[0] = 0  # an all-zero block (d = 0)
    x[1] = np.float32(0.25) * np.round(x[1] * 4)  # repeated values, ties
    x[2] = -np.abs(x[2])  # one sign only
    return x


def main():
    out = os.path.join("tests", "quant")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261202)
    for name, t, f16 in TYPES:
        qk, bb = quants.GGML_QUANT_SIZES[t]
        nb = 64 if qk == 32 else 16
        blocks = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
        for off in f16:
            blocks[:, off:off + 2] = sane_f16(rng, nb)
        values = quants.dequantize(blocks, t).astype(np.float32).reshape(-1)
        assert np.all(np.isfinite(values)), name
        if t in QUANTIZES:
            nq = 32
            xin = quant_input(rng, nq, qk)
            qout = quants.quantize(xin, t).reshape(nq, bb)
        else:
            nq = 0
            xin = np.zeros(0, np.float32)
            qout = np.zeros(0, np.uint8)
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(b"GPQF")
            f.write(struct.pack("<6I", 1, int(t), qk, bb, nb, nq))
            f.write(blocks.tobytes())
            f.write(values.astype("<f4").tobytes())
            f.write(xin.astype("<f4").tobytes())
            f.write(qout.astype(np.uint8).tobytes())
        print(f"{name}: {nb} blocks, {nq} quantized blocks", file=sys.stderr)


if __name__ == "__main__":
    main()
