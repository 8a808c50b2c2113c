#!/usr/bin/env python3
"""Writes tests/gguf/fixture.gguf with the python `gguf` package's GGUFWriter (pip install gguf), so
tests/test_gguf.c checks the C reader against a writer other than its own. The values are
deterministic; the C test asserts them. Usage: scripts/gguf/make_fixture.py [OUT]"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

out = sys.argv[1] if len(sys.argv) > 1 else "tests/gguf/fixture.gguf"
w = GGUFWriter(out, "llama")
w.add_custom_alignment(64)
w.add_name("gplan fixture")
w.add_block_count(2)
w.add_context_length(128)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_uint8("test.u8", 200)
w.add_int8("test.i8", -100)
w.add_uint16("test.u16", 60000)
w.add_int16("test.i16", -30000)
w.add_int32("test.i32", -2000000000)
w.add_uint64("test.u64", 1 << 40)
w.add_int64("test.i64", -(1 << 50))
w.add_float64("test.f64", 3.141592653589793)
w.add_bool("test.bool", True)
w.add_string("test.utf8", "h\u00e9llo \u4e16\u754c")
w.add_array("test.arr_i32", [1, -2, 3])
w.add_array("test.arr_f32", [0.5, -1.25])
w.add_array("test.arr_str", ["a", "", "\u00e9t\u00e9"])
w.add_token_list(["<s>", "</s>", "hi", " there"])

# f32 [3, 2] (ggml ne = {2, 3}), f16 [4], i32 [5], q8_0 [2, 32] (2 rows of one 34-byte block).
w.add_tensor("blk.0.attn_norm.weight", np.arange(6, dtype=np.float32).reshape(3, 2) * 0.5)
w.add_tensor("token_embd.weight", np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16))
w.add_tensor("test.ids", np.array([7, -1, 0, 2147483647, -2147483648], dtype=np.int32))
q = np.arange(2 * 34, dtype=np.uint8).reshape(2, 34)
w.add_tensor("blk.0.attn_q.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
