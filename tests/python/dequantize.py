"""Dequantizes every tensor of a GGUF file with the `gguf` package (llama.cpp's numpy
reference) and writes each as little-endian float32 to OUT_DIR/<tensor name>.f32.
Run by tests/tests/gguf_reference.rs:  python dequantize.py FILE.gguf OUT_DIR"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

path, out = sys.argv[1], Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for t in GGUFReader(path).tensors:
    values = dequantize(t.data, t.tensor_type).astype("<f4", copy=False).ravel()
    (out / f"{t.name}.f32").write_bytes(values.tobytes())
    print(t.name, t.tensor_type.name, values.size)
