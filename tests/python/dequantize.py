"""Dequantizes every tensor of a GGUF file with the `gguf` package (llama.cpp's numpy
reference) and writes each as little-endian float32 to OUT_DIR/<tensor name>.f32.
Run by tests/tests/gguf_reference.rs:  python dequantize.py FILE.gguf OUT_DIR [MAX_ROWS]
(MAX_ROWS: only the first rows of each tensor, for a large real file)."""
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

path, out = sys.argv[1], Path(sys.argv[2])
max_rows = int(sys.argv[3]) if len(sys.argv) > 3 else None
out.mkdir(parents=True, exist_ok=True)
for t in GGUFReader(path).tensors:
    data = t.data if max_rows is None or t.data.ndim < 2 else t.data[:max_rows]
    values = dequantize(data, t.tensor_type).astype("<f4", copy=False).ravel()
    (out / f"{t.name}.f32").write_bytes(values.tobytes())
    print(t.name, t.tensor_type.name, values.size)
