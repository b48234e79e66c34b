//! Shared helpers for the cross-crate tests: the test model (fetched once), the oracle directory,
//! a small .npy reader, and synthetic random-weight Llama GGUFs that carry the real SmolLM2
//! tokenizer, so model code can be tested at any shape without another download.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use inferno_core::config::ModelConfig;
use inferno_core::formats::gguf::{GgufFile, GgufWriter, Value};
use inferno_core::quant::{quantize_bytes, GgmlType};

/// Path of the SmolLM2-135M-Instruct Q4_1 GGUF, fetched (and checksummed) by
/// scripts/fetch-model.sh on first use. Panics with the script's output if it fails: the model
/// tests must not pass silently without a model.
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-model.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
        assert!(
            path.is_file(),
            "fetch-model.sh printed '{}', which is not a file",
            path.display()
        );
        path
    })
    .clone()
}

/// The test model's bytes, read once per test binary.
pub fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = model_path();
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    })
}

/// The oracle's reference data (../../shared/oracle from the tests crate), or `$INFERNO_ORACLE`.
pub fn oracle_dir() -> PathBuf {
    match std::env::var_os("INFERNO_ORACLE") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/oracle"),
    }
}

/// Reads a little-endian float32 C-order .npy file (format versions 1-3): (shape, values).
pub fn read_npy_f32(path: impl AsRef<Path>) -> (Vec<usize>, Vec<f32>) {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_npy_f32(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The parsing half of [`read_npy_f32`].
pub fn parse_npy_f32(bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>), String> {
    if bytes.get(..6) != Some(b"\x93NUMPY".as_slice()) {
        return Err("not a .npy file".into());
    }
    let major = *bytes.get(6).ok_or("truncated")?;
    let (header_len, header_start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes(bytes.get(8..12).ok_or("truncated")?.try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(header_start..header_start + header_len)
            .ok_or("truncated header")?,
    )
    .map_err(|_| "header is not UTF-8")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("not little-endian float32: {header}"));
    }
    if header.contains("'fortran_order': True") {
        return Err("Fortran order is not supported".into());
    }
    let shape_text = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| {
            s.split_once('(')
                .and_then(|(_, s)| s.split_once(')'))
                .map(|(s, _)| s)
        })
        .ok_or("no shape")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("bad shape {shape_text}")))
        .collect::<Result<_, _>>()?;
    let data = &bytes[header_start + header_len..];
    let n: usize = shape.iter().product();
    if data.len() != n * 4 {
        return Err(format!(
            "shape {shape:?} needs {} bytes, file has {}",
            n * 4,
            data.len()
        ));
    }
    Ok((
        shape,
        data.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    ))
}

/// Dimensions of a synthetic Llama model.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticShape {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rows of the embedding. The tokenizer is always SmolLM2's 49152 tokens; a smaller vocab
    /// means the tokenizer can produce ids the model does not have.
    pub vocab_size: usize,
    pub context_length: usize,
    pub tied_embeddings: bool,
    pub rope_theta: f32,
    pub rms_eps: f32,
}

/// SmolLM2's vocabulary size: the synthetic models reuse its tokenizer.
pub const SMOLLM2_VOCAB: usize = 49152;

impl SyntheticShape {
    /// Small and fast: 2 layers of dim 64, GQA 4:2, head_dim 16, tied.
    pub fn tiny() -> Self {
        SyntheticShape {
            dim: 64,
            hidden_dim: 128,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            vocab_size: SMOLLM2_VOCAB,
            context_length: 512,
            tied_embeddings: true,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
        }
    }

    /// [`SyntheticShape::tiny`] with a separate output matrix.
    pub fn untied() -> Self {
        SyntheticShape {
            tied_embeddings: false,
            ..Self::tiny()
        }
    }

    /// head_dim 128 without GQA: dim 256 = 2 heads of 128, 2 KV heads.
    pub fn head_dim_128() -> Self {
        SyntheticShape {
            dim: 256,
            hidden_dim: 512,
            n_heads: 2,
            n_kv_heads: 2,
            head_dim: 128,
            ..Self::tiny()
        }
    }

    /// TinyLlama-1.1B's shape (22 layers, dim 2048, 32 heads, 4 KV heads, FFN 5632, untied), for
    /// the bench. The vocabulary is SmolLM2's 49152 rather than TinyLlama's 32000 so that every id
    /// the real tokenizer produces exists: the output matmul is 1.5x TinyLlama's.
    pub fn tinyllama_1_1b() -> Self {
        SyntheticShape {
            dim: 2048,
            hidden_dim: 5632,
            n_layers: 22,
            n_heads: 32,
            n_kv_heads: 4,
            head_dim: 64,
            vocab_size: SMOLLM2_VOCAB,
            context_length: 2048,
            tied_embeddings: false,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
        }
    }

    /// The config [`ModelConfig::from_gguf`] reads back from [`synthetic_gguf`]'s file.
    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            architecture: "llama".into(),
            dim: self.dim,
            hidden_dim: self.hidden_dim,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            vocab_size: self.vocab_size,
            context_length: self.context_length,
            rms_eps: self.rms_eps,
            rope_theta: self.rope_theta,
            rope_scaling: None,
            tied_embeddings: self.tied_embeddings,
            attention_bias: false,
            qk_norm: false,
        }
    }
}

/// splitmix64: tiny, portable, and good enough for random weights.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-a, a), from the top 24 bits (exact in f32).
    pub fn uniform(&mut self, a: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * unit - 1.0) * a
    }
}

/// All `tokenizer.*` metadata of the real SmolLM2 GGUF (chat template included).
pub fn smollm2_tokenizer_metadata() -> &'static [(String, Value)] {
    static META: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    META.get_or_init(|| {
        let file = GgufFile::parse(model_bytes()).expect("the test model parses");
        file.metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned()
            .collect()
    })
}

/// A random-weight Llama GGUF of the given shape: matrices of type `ty` (uniform in
/// ±1/sqrt(cols)), F32 norms near 1.0, the real SmolLM2 tokenizer. Same seed, same bytes.
pub fn synthetic_gguf(shape: &SyntheticShape, seed: u64, ty: GgmlType) -> Vec<u8> {
    let config = shape.config();
    config
        .validate()
        .expect("synthetic shape is a valid config");
    let mut writer = GgufWriter::new();
    for (key, value) in config.to_gguf_metadata() {
        writer.add_metadata(key, value).unwrap();
    }
    writer
        .add_metadata(
            "general.name",
            Value::String(format!("synthetic llama seed {seed}")),
        )
        .unwrap();
    for (key, value) in smollm2_tokenizer_metadata() {
        writer.add_metadata(key.clone(), value.clone()).unwrap();
    }

    let mut rng = SplitMix64(seed);
    let mut matrix = |name: &str, rows: usize, cols: usize| {
        let a = 1.0 / (cols as f32).sqrt();
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.uniform(a)).collect();
        (
            name.to_string(),
            ty,
            vec![rows, cols],
            quantize_bytes(ty, &x),
        )
    };
    let (q_dim, kv_dim) = (config.q_dim(), config.kv_dim());
    let mut tensors = vec![matrix("token_embd.weight", shape.vocab_size, shape.dim)];
    if !shape.tied_embeddings {
        tensors.push(matrix("output.weight", shape.vocab_size, shape.dim));
    }
    for l in 0..shape.n_layers {
        tensors.push(matrix(&format!("blk.{l}.attn_q.weight"), q_dim, shape.dim));
        tensors.push(matrix(&format!("blk.{l}.attn_k.weight"), kv_dim, shape.dim));
        tensors.push(matrix(&format!("blk.{l}.attn_v.weight"), kv_dim, shape.dim));
        tensors.push(matrix(
            &format!("blk.{l}.attn_output.weight"),
            shape.dim,
            q_dim,
        ));
        tensors.push(matrix(
            &format!("blk.{l}.ffn_gate.weight"),
            shape.hidden_dim,
            shape.dim,
        ));
        tensors.push(matrix(
            &format!("blk.{l}.ffn_up.weight"),
            shape.hidden_dim,
            shape.dim,
        ));
        tensors.push(matrix(
            &format!("blk.{l}.ffn_down.weight"),
            shape.dim,
            shape.hidden_dim,
        ));
    }
    let mut norm = |name: String| {
        let x: Vec<f32> = (0..shape.dim).map(|_| 1.0 + rng.uniform(0.1)).collect();
        (
            name,
            GgmlType::F32,
            vec![shape.dim],
            quantize_bytes(GgmlType::F32, &x),
        )
    };
    tensors.push(norm("output_norm.weight".into()));
    for l in 0..shape.n_layers {
        tensors.push(norm(format!("blk.{l}.attn_norm.weight")));
        tensors.push(norm(format!("blk.{l}.ffn_norm.weight")));
    }
    for (name, ty, dims, data) in tensors {
        writer.add_tensor(name, ty, &dims, data).unwrap();
    }
    writer.to_bytes()
}
