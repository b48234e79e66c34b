//! Our dequantization equals llama.cpp's, checked against an independent implementation: the
//! `gguf` Python package (maintained with llama.cpp; numpy dequantizers for every type) reads a
//! GGUF file of random and edge-case blocks of every type we load, and its float32 values must
//! equal ours bit for bit (NaN compared as NaN: its payload is the hardware's to choose).
//! The package lives in the venv of scripts/setup-python.sh, which `make test` runs and passes
//! as INFERNO_PYTHON; without it this test says so and skips.

use std::path::PathBuf;
use std::process::Command;

use inferno_core::formats::gguf::{GgufFile, GgufWriter};
use inferno_core::quant::{dequantize_bytes, GgmlType};

/// A small xorshift: the same blocks on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// An f16 scale: mostly ordinary, sometimes 0, subnormal, 65504, negative, inf or NaN.
    fn scale(&mut self) -> [u8; 2] {
        let bits: u16 = match self.next() % 16 {
            0 => 0,
            1 => 0x0001,
            2 => 0x7bff,
            3 => 0xbc00,
            4 => 0x7c00,
            5 => 0xfe01,
            _ => 0x2000 | (self.next() as u16 & 0x0fff),
        };
        bits.to_le_bytes()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match self.next() % 8 {
                0 => 0x00,
                1 => 0xff,
                _ => self.next() as u8,
            })
            .collect()
    }
}

/// `n` blocks of `ty` as stored: the f16 fields at the front of each block get
/// [`Rng::scale`] values, the rest random bytes with extremes.
fn blocks(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    // Byte offsets of the f16 scales in each type's block (ggml's block_* structs).
    let scales: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    };
    let mut out = Vec::new();
    for _ in 0..n {
        let mut block = rng.bytes(ty.block_bytes());
        for &at in scales {
            block[at..at + 2].copy_from_slice(&rng.scale());
        }
        out.extend(block);
    }
    out
}

fn python() -> Option<PathBuf> {
    std::env::var_os("INFERNO_PYTHON").map(PathBuf::from)
}

#[test]
fn dequantize_q4_0_q4_1_q5_0_q5_1_q8_0_q2_k_to_q6_k_iq4_nl_iq4_xs_f16_bf16_f32_equals_gguf_python_bitwise(
) {
    let Some(python) = python() else {
        eprintln!(
            "skipping: set INFERNO_PYTHON to scripts/setup-python.sh's python (make test does)"
        );
        return;
    };
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ];
    let (rows, cols) = (48, 256);
    let mut rng = Rng(0x1d2c_3b4a_5968_7786);
    let mut tensors = Vec::new();
    for ty in types {
        let n_blocks = rows * cols / ty.block_len();
        let mut bytes = blocks(&mut rng, ty, n_blocks);
        if ty == GgmlType::F32 {
            // Finite and special floats; NaNs compared as NaN.
            for (i, c) in bytes.chunks_exact_mut(4).enumerate() {
                if i % 97 == 0 {
                    c.copy_from_slice(&f32::INFINITY.to_le_bytes());
                }
            }
        }
        tensors.push((format!("t.{}", ty.name()), ty, bytes));
    }
    let dir = std::env::temp_dir().join(format!("inferno-gguf-reference-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("blocks.gguf");
    let mut writer = GgufWriter::new();
    for (name, ty, bytes) in &tensors {
        writer
            .add_tensor(name.clone(), *ty, &[rows, cols], bytes.clone())
            .unwrap();
    }
    writer
        .write_to(std::fs::File::create(&file).unwrap())
        .unwrap();

    let out = dir.join("out");
    let o = Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/python/dequantize.py"))
        .arg(&file)
        .arg(&out)
        .output()
        .expect("start python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (name, ty, bytes) in &tensors {
        let ours = dequantize_bytes(*ty, bytes);
        let theirs: Vec<f32> = std::fs::read(out.join(format!("{name}.f32")))
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{name}: element count");
        let mut nans = 0;
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            if a.is_nan() || b.is_nan() {
                assert!(
                    a.is_nan() && b.is_nan(),
                    "{name}[{i}]: ours {a:e}, gguf {b:e}"
                );
                nans += 1;
            } else {
                assert!(
                    a.to_bits() == b.to_bits(),
                    "{name}[{i}]: ours {a:e} ({:#x}), gguf {b:e} ({:#x})",
                    a.to_bits(),
                    b.to_bits()
                );
            }
        }
        eprintln!("{name}: {} values equal ({nans} NaN)", ours.len());
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn gemma3_270m_q4_k_m_real_llama_cpp_blocks_first_64_rows_of_every_tensor_equal_gguf_python() {
    let Some(python) = python() else {
        eprintln!(
            "skipping: set INFERNO_PYTHON to scripts/setup-python.sh's python (make test does)"
        );
        return;
    };
    const ROWS: usize = 64;
    let path = inferno_tests::gemma_path();
    let bytes = std::fs::read(&path).unwrap();
    let file = GgufFile::parse(&bytes).expect("Gemma 3's K-quant GGUF parses");
    let dir = std::env::temp_dir().join(format!("inferno-gguf-gemma-{}", std::process::id()));
    let o = Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/python/dequantize.py"))
        .arg(&path)
        .arg(&dir)
        .arg(ROWS.to_string())
        .output()
        .expect("start python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut by_type = std::collections::BTreeMap::<&str, usize>::new();
    for t in &file.tensors {
        let data = file.tensor_data(t);
        let cols = t.dims[0] as usize;
        let rows = t.dims[1..].iter().product::<u64>() as usize;
        let row_bytes = data.len() / rows.max(1);
        let take = if t.dims.len() >= 2 {
            rows.min(ROWS)
        } else {
            rows
        };
        let ours = dequantize_bytes(t.ty, &data[..take * row_bytes]);
        assert_eq!(ours.len(), take * cols, "{}", t.name);
        let theirs: Vec<f32> = std::fs::read(dir.join(format!("{}.f32", t.name)))
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{}: element count", t.name);
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{} [{}] element {i}: ours {a:e}, gguf {b:e}",
                t.name,
                t.ty.name()
            );
        }
        *by_type.entry(t.ty.name()).or_default() += 1;
    }
    eprintln!("Gemma 3 270M Q4_K_M: tensors per type, all equal: {by_type:?}");
    assert!(
        by_type.contains_key("Q4_K") && by_type.contains_key("Q6_K"),
        "{by_type:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
