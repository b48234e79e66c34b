//! A plain `wasm32-unknown-unknown` module (no wasm-bindgen) that runs the wasm kernels'
//! bitwise self test ([`inferno_core::kernels::wasm32::selftest`]) and matmul and attention
//! benchmarks, for run.mjs under Node.js. Built three times by `make wasm-selftest`: reference
//! (scalar only), simd128, and simd128 + relaxed-simd. The exports take and return numbers only; a message
//! (the first mismatch, or the backends checked) is read from memory at
//! `inferno_message_ptr()`, `inferno_message_len()` bytes of UTF-8.
//!
//! Natively the crate is only a library of the same functions, so the workspace builds.

use std::sync::Mutex;

use inferno_core::kernels::{Input, Kernels, Matrix};
use inferno_core::quant::kquants::{BlockQ4K, BlockQ6K, KBlock, QK_K};
use inferno_core::quant::{BlockQ4_1, BlockQ8Act, BlockQ8_0, GgmlType, QK};

static MESSAGE: Mutex<String> = Mutex::new(String::new());

fn set_message(text: String) {
    *MESSAGE.lock().unwrap_or_else(|e| e.into_inner()) = text;
}

/// Where the last message starts in linear memory (valid until the next export call).
#[no_mangle]
pub extern "C" fn inferno_message_ptr() -> *const u8 {
    MESSAGE.lock().unwrap_or_else(|e| e.into_inner()).as_ptr()
}

/// The last message's length in bytes.
#[no_mangle]
pub extern "C" fn inferno_message_len() -> usize {
    MESSAGE.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// The backends of this build, comma-separated, as the message; returns their count.
#[no_mangle]
pub extern "C" fn inferno_backends() -> u32 {
    let names: Vec<_> = Kernels::available().iter().map(|k| k.name).collect();
    set_message(names.join(","));
    names.len() as u32
}

/// 0 when every wasm backend of this build equals the reference bitwise on every case (the
/// message lists the backends), 1 with the first mismatch as the message.
#[no_mangle]
pub extern "C" fn inferno_self_test(seed: u64) -> i32 {
    match self_test(seed) {
        Ok(()) => {
            inferno_backends();
            0
        }
        Err(e) => {
            set_message(e);
            1
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn self_test(seed: u64) -> Result<(), String> {
    inferno_core::kernels::wasm32::selftest::self_test(seed)
}

#[cfg(not(target_arch = "wasm32"))]
fn self_test(_seed: u64) -> Result<(), String> {
    Err("the self test runs inside the wasm build (make wasm-selftest)".into())
}

/// The benchmark's data: a quantized matrix of SmolLM2-135M's width (576 columns; Q4_1 as its
/// layers, Q8_0 as its tied output head) or of Gemma 3 270M's FFN down projection (2048 columns;
/// Q4_K and Q6_K as in its Q4_K_M file) and `tokens` quantized activations.
struct Bench {
    w: Matrix,
    rows: usize,
    x: Vec<BlockQ8Act>,
    out: Vec<f32>,
    tokens: usize,
}

static BENCH: Mutex<Option<Bench>> = Mutex::new(None);

/// Columns of the per-block benchmark matrices.
pub const BENCH_COLS: usize = 576;
/// Columns of the K-quant benchmark matrices.
pub const BENCH_K_COLS: usize = 2048;

/// Prepares the benchmark: a `rows` x cols matrix of `kind` 0 = Q4_1 or 1 = Q8_0 (576 columns),
/// 2 = Q4_K or 3 = Q6_K (2048 columns), and `tokens` tokens (deterministic pseudo-random data).
/// Returns cols.
#[no_mangle]
pub extern "C" fn inferno_bench_setup(kind: u32, rows: u32, tokens: u32) -> u32 {
    let (rows, tokens) = (rows.max(1) as usize, tokens.max(1) as usize);
    let mut state = 0x1234_5678_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let cols = if kind >= 2 { BENCH_K_COLS } else { BENCH_COLS };
    let nb = cols / QK;
    let w = if kind >= 2 {
        // Random quants, sub-block scales and minimums, then finite super-block scales.
        fn k_bytes<B: KBlock>(n: usize, next: &mut impl FnMut() -> u32) -> Vec<u8> {
            let mut bytes = Vec::with_capacity(n * B::BYTES);
            for _ in 0..n {
                let raw: Vec<u8> = (0..B::BYTES).map(|_| next() as u8).collect();
                let mut block = B::from_bytes(&raw);
                let (d, dmin) = (
                    0x2000 | (next() & 0x3ff) as u16,
                    0x1000 | (next() & 0x3ff) as u16,
                );
                block.set_scales(d, dmin);
                block.to_bytes(&mut bytes);
            }
            bytes
        }
        let n = rows * cols / QK_K;
        let (ty, bytes) = if kind == 2 {
            (GgmlType::Q4_K, k_bytes::<BlockQ4K>(n, &mut next))
        } else {
            (GgmlType::Q6_K, k_bytes::<BlockQ6K>(n, &mut next))
        };
        Matrix::from_bytes("bench", ty, rows, cols, &bytes).expect("whole super-blocks")
    } else if kind == 1 {
        let blocks: Vec<BlockQ8_0> = (0..rows * nb)
            .map(|_| BlockQ8_0 {
                d: 0x2000 | (next() & 0x3ff) as u16,
                qs: std::array::from_fn(|_| (next() % 255) as i8 - 127),
            })
            .collect();
        Matrix::from_q8_0(rows, BENCH_COLS, &blocks)
    } else {
        let blocks: Vec<BlockQ4_1> = (0..rows * nb)
            .map(|_| BlockQ4_1 {
                d: 0x2000 | (next() & 0x3ff) as u16,
                m: 0xa000 | (next() & 0x3ff) as u16,
                qs: std::array::from_fn(|_| next() as u8),
            })
            .collect();
        Matrix::from_q4_1(rows, BENCH_COLS, &blocks)
    };
    let xf: Vec<f32> = (0..tokens * cols)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let mut x = vec![BlockQ8Act::default(); tokens * nb];
    inferno_core::kernels::reference::quantize_q8(&xf, &mut x);
    let out = vec![0.0; tokens * rows];
    *BENCH.lock().unwrap_or_else(|e| e.into_inner()) = Some(Bench {
        w,
        rows,
        x,
        out,
        tokens,
    });
    cols as u32
}

/// Runs the benchmark matmul `iterations` times with backend `backend` (an index into
/// `Kernels::available()`); returns a checksum of the output, so nothing is optimized away.
#[no_mangle]
pub extern "C" fn inferno_bench_run(backend: u32, iterations: u32) -> f32 {
    let mut guard = BENCH.lock().unwrap_or_else(|e| e.into_inner());
    let Some(bench) = guard.as_mut() else {
        return f32::NAN;
    };
    let all = Kernels::available();
    let Some(kernels) = all.get(backend as usize) else {
        return f32::NAN;
    };
    let Bench {
        w,
        rows,
        x,
        out,
        tokens,
    } = bench;
    for _ in 0..iterations {
        let mut outs: Vec<&mut [f32]> = out.chunks_mut(*rows).take(*tokens).collect();
        (kernels.matmul)(w, 0, &Input::Q8(x), &mut outs);
    }
    out.iter().sum()
}

/// The attention benchmark's data: one KV head's f16 cache of `positions` rows (in rows of 4 KV
/// heads) and one query of its `heads` query heads.
struct AttentionBench {
    keys: Vec<u16>,
    values: Vec<u16>,
    q: Vec<f32>,
    out: Vec<f32>,
    positions: usize,
    head_dim: usize,
}

static ATTENTION_BENCH: Mutex<Option<AttentionBench>> = Mutex::new(None);

/// Prepares the attention benchmark over `positions` cached positions (deterministic data) for
/// `heads` query heads of `head_dim` (a multiple of 8 up to 256; TinyLlama: 8 of 64, Gemma 3: 4
/// of 256).
#[no_mangle]
pub extern "C" fn inferno_bench_attention_setup(positions: u32, head_dim: u32, heads: u32) {
    let positions = positions.max(1) as usize;
    let head_dim = (head_dim.clamp(8, 256) / 8 * 8) as usize;
    let heads = heads.clamp(1, 16) as usize;
    let kv_dim = 4 * head_dim;
    let mut state = 0x9e37_79b9_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % 2001) as f32 / 1000.0 - 1.0
    };
    let mut cache = || -> Vec<u16> {
        (0..positions * kv_dim)
            .map(|_| inferno_core::quant::f32_to_f16(next()))
            .collect()
    };
    let (keys, values) = (cache(), cache());
    let q = (0..heads * head_dim)
        .map(|i| (i % 17) as f32 / 8.0 - 1.0)
        .collect();
    *ATTENTION_BENCH.lock().unwrap_or_else(|e| e.into_inner()) = Some(AttentionBench {
        keys,
        values,
        q,
        out: vec![0.0; heads * head_dim],
        positions,
        head_dim,
    });
}

/// Runs one decode step's attention for KV head 1 (its query heads over every position)
/// `iterations` times with backend `backend`; returns a checksum of the output.
#[no_mangle]
pub extern "C" fn inferno_bench_attention_run(backend: u32, iterations: u32) -> f32 {
    let mut guard = ATTENTION_BENCH.lock().unwrap_or_else(|e| e.into_inner());
    let (Some(bench), Some(kernels)) = (
        guard.as_mut(),
        Kernels::available().get(backend as usize).copied(),
    ) else {
        return f32::NAN;
    };
    let kv = inferno_core::kernels::KvHead {
        keys: inferno_core::kernels::KvSlice::F16(&bench.keys),
        values: inferno_core::kernels::KvSlice::F16(&bench.values),
        positions: bench.positions,
        kv_dim: 4 * bench.head_dim,
        offset: bench.head_dim,
        head_dim: bench.head_dim,
        scale: 1.0 / (bench.head_dim as f32).sqrt(),
    };
    for _ in 0..iterations {
        (kernels.attention)(&[&bench.q[..]], &kv, &mut [&mut bench.out[..]]);
    }
    bench.out.iter().sum()
}
