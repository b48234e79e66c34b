//! Weights and loading: the immutable [`Weights`] every session shares, built once from any
//! format (shapes checked against the config, GGUF's RoPE row order undone, matrices kept as
//! stored or dequantized to f32), and the RoPE frequency table.

use crate::config::{ModelConfig, RopeScaling};
use crate::formats::{ModelSource, QkRowOrder, RawTensor};
use crate::kernels::Matrix;
use crate::memory::Arena;
use crate::quant::{GgmlType, QK};
use crate::{Error, Result};

/// How weights are kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightDtype {
    /// As stored in the file: quantized matrices multiply Q8 activations (the fast path).
    #[default]
    AsStored,
    /// Everything dequantized to f32 with f32 activations (the verification path).
    F32,
}

/// One transformer block's weights.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,                   // (dim)
    pub wqkv: Stacked, // (q_dim + 2*kv_dim, dim): wq, wk, wv; RoPE pairs (i, i + head_dim/2)
    pub bq: Option<Vec<f32>>, // (q_dim), Qwen2
    pub bk: Option<Vec<f32>>, // (kv_dim)
    pub bv: Option<Vec<f32>>, // (kv_dim)
    pub q_norm: Option<Vec<f32>>, // (head_dim), Qwen3
    pub k_norm: Option<Vec<f32>>, // (head_dim)
    pub wo: Matrix,    // (dim, q_dim)
    pub post_attention_norm: Option<Vec<f32>>, // (dim), Gemma
    pub ffn_norm: Vec<f32>, // (dim)
    pub w_gate_up: Stacked, // (2*hidden_dim, dim): w_gate, w_up
    pub w_down: Matrix, // (dim, hidden_dim)
    pub post_ffw_norm: Option<Vec<f32>>, // (dim), Gemma
}

/// Matrices whose outputs follow one another in one output row (Q, K, V; gate, up): a single
/// matrix when their types match, so one matmul call and one activation quantization serve
/// them all; otherwise one matrix per part. Rows are independent, so both give the same values.
#[derive(Debug, Clone)]
pub struct Stacked {
    /// One fused matrix, or the parts in order.
    pub matrices: Vec<Matrix>,
    /// Rows of each logical part (e.g. [q_dim, kv_dim, kv_dim]).
    pub part_rows: Vec<usize>,
}

impl Stacked {
    /// Fuses `parts` when their types and columns match.
    pub fn new(parts: Vec<Matrix>) -> Stacked {
        let part_rows = parts.iter().map(|m| m.rows).collect();
        let refs: Vec<&Matrix> = parts.iter().collect();
        let matrices = match Matrix::concat_rows(&refs) {
            Some(fused) if parts.len() > 1 => vec![fused],
            _ => parts,
        };
        Stacked {
            matrices,
            part_rows,
        }
    }

    /// Output values per token (the rows of every part).
    pub fn rows(&self) -> usize {
        self.part_rows.iter().sum()
    }

    /// Part `i` as its own matrix (a copy; e.g. to write a file).
    pub fn part(&self, i: usize) -> Matrix {
        let first: usize = self.part_rows[..i].iter().sum();
        let mut source = Vec::with_capacity(self.part_rows[i]);
        let (mut m, mut r) = (0, first);
        while source.len() < self.part_rows[i] {
            if r >= self.matrices[m].rows {
                r -= self.matrices[m].rows;
                m += 1;
                continue;
            }
            source.push((m, r));
            r += 1;
        }
        let refs: Vec<&Matrix> = self.matrices.iter().collect();
        Matrix::gather_rows(&refs, &source).expect("parts of one stack")
    }

    fn byte_size(&self) -> usize {
        self.matrices.iter().map(|m| m.byte_size()).sum()
    }
}

/// Everything a forward pass reads and nobody writes.
#[derive(Debug, Clone)]
pub struct Weights {
    pub config: ModelConfig,
    /// How the matrices are kept; the KV cache follows (f16 as stored, f32 on the f32 path).
    pub dtype: WeightDtype,
    pub token_embd: Matrix, // (vocab_size, dim)
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // (dim)
    /// `None` when the output projection is the token embedding (tied).
    pub output: Option<Matrix>, // (vocab_size, dim)
    /// RoPE inverse frequencies, scaling applied (head_dim / 2).
    pub inv_freq: Vec<f32>,
    /// Those of the windowed layers when they have a RoPE base of their own (Gemma 3), unscaled
    /// (head_dim / 2).
    pub inv_freq_local: Option<Vec<f32>>,
}

impl Weights {
    /// Builds the weights from any format, checking every shape against the config.
    pub fn load(source: &ModelSource<'_>, dtype: WeightDtype) -> Result<Weights> {
        Self::load_with_progress(source, dtype, &mut |_, _| {})
    }

    /// Like [`Weights::load`], calling `progress(done, total)` after each tensor.
    pub fn load_with_progress(
        source: &ModelSource<'_>,
        dtype: WeightDtype,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Weights> {
        let c = source.config.clone();
        c.validate()?;
        let (dim, hidden, q_dim, kv_dim, hd) =
            (c.dim, c.hidden_dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let total = 3 + c.n_layers * 9;
        let mut done = 0;
        let mut step = |progress: &mut dyn FnMut(usize, usize)| {
            done += 1;
            progress(done.min(total), total);
        };

        let matrix = |name: &str, rows: usize, cols: usize| -> Result<Matrix> {
            let t = tensor(source, name)?;
            check_shape(t, &[rows, cols])?;
            // Told of the source rows as they are tiled, and of the whole tensor at the end.
            let m = Matrix::from_bytes_releasing(name, t.ty, rows, cols, t.data, source.release)?;
            if m.wants_q8() && cols % QK != 0 {
                return Err(Error::ShapeMismatch {
                    name: name.into(),
                    expected: vec![rows, cols.next_multiple_of(QK)],
                    got: vec![rows, cols],
                });
            }
            Ok(match dtype {
                WeightDtype::AsStored => m,
                WeightDtype::F32 => m.to_f32(),
            })
        };
        let vector = |name: &str, len: usize| -> Result<Vec<f32>> {
            let t = tensor(source, name)?;
            check_shape(t, &[len])?;
            vector_f32(t)
        };
        // Present exactly when the architecture has them (Gemma's post norms).
        let vector_if = |present: bool, name: &str, len: usize| -> Result<Option<Vec<f32>>> {
            present.then(|| vector(name, len)).transpose()
        };
        let optional_vector = |name: &str, len: usize| -> Result<Option<Vec<f32>>> {
            match source.tensor(name) {
                Some(t) => {
                    check_shape(t, &[len])?;
                    vector_f32(t).map(Some)
                }
                None => Ok(None),
            }
        };
        // GGUF llama files store Q/K rows as RoPE pairs (2i, 2i+1); our kernels rotate the HF pairs
        // (i, i + head_dim/2). Undo the permutation by moving whole rows.
        let unpermute = |m: Matrix, n_heads: usize| -> Matrix {
            match source.qk_row_order {
                QkRowOrder::HalfSplit => m,
                QkRowOrder::Interleaved => m.permute_rows(&interleaved_to_half_split(n_heads, hd)),
            }
        };

        let token_embd = matrix("token_embd.weight", c.vocab_size, dim)?;
        step(progress);
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let name = |s: &str| format!("blk.{l}.{s}");
            let layer = LayerWeights {
                attn_norm: vector(&name("attn_norm.weight"), dim)?,
                wqkv: Stacked::new(vec![
                    unpermute(matrix(&name("attn_q.weight"), q_dim, dim)?, c.n_heads),
                    unpermute(matrix(&name("attn_k.weight"), kv_dim, dim)?, c.n_kv_heads),
                    matrix(&name("attn_v.weight"), kv_dim, dim)?,
                ]),
                bq: optional_vector(&name("attn_q.bias"), q_dim)?,
                bk: optional_vector(&name("attn_k.bias"), kv_dim)?,
                bv: optional_vector(&name("attn_v.bias"), kv_dim)?,
                q_norm: optional_vector(&name("attn_q_norm.weight"), hd)?,
                k_norm: optional_vector(&name("attn_k_norm.weight"), hd)?,
                wo: matrix(&name("attn_output.weight"), dim, q_dim)?,
                post_attention_norm: vector_if(
                    c.extras.post_norms,
                    &name("post_attention_norm.weight"),
                    dim,
                )?,
                ffn_norm: vector(&name("ffn_norm.weight"), dim)?,
                w_gate_up: Stacked::new(vec![
                    matrix(&name("ffn_gate.weight"), hidden, dim)?,
                    matrix(&name("ffn_up.weight"), hidden, dim)?,
                ]),
                w_down: matrix(&name("ffn_down.weight"), dim, hidden)?,
                post_ffw_norm: vector_if(c.extras.post_norms, &name("post_ffw_norm.weight"), dim)?,
            };
            if source.qk_row_order == QkRowOrder::Interleaved
                && (layer.bq.is_some() || layer.bk.is_some())
            {
                return Err(Error::format(
                    "model",
                    "Q/K biases with interleaved GGUF row order are not supported",
                ));
            }
            layers.push(layer);
            for _ in 0..9 {
                step(progress);
            }
        }
        let output_norm = vector("output_norm.weight", dim)?;
        step(progress);
        let output = if source.tensor("output.weight").is_some() {
            Some(matrix("output.weight", c.vocab_size, dim)?)
        } else if c.tied_embeddings {
            None
        } else {
            return Err(Error::MissingTensor {
                name: "output.weight".into(),
            });
        };
        step(progress);
        let inv_freq = rope_inv_freq(&c);
        let inv_freq_local = c.extras.rope_theta_local.map(|theta| {
            rope_inv_freq(&ModelConfig {
                rope_theta: theta,
                rope_scaling: None,
                ..c.clone()
            })
        });
        let mut weights = Weights {
            config: c,
            dtype,
            token_embd,
            layers,
            output_norm,
            output,
            inv_freq,
            inv_freq_local,
        };
        weights.move_into_arena();
        Ok(weights)
    }

    /// Every matrix, in the order a forward reads them (the embedding last: one row of it).
    fn matrices_mut(&mut self) -> impl Iterator<Item = &mut Matrix> {
        let layers = self.layers.iter_mut().flat_map(|l| {
            let LayerWeights {
                wqkv,
                wo,
                w_gate_up,
                w_down,
                ..
            } = l;
            wqkv.matrices
                .iter_mut()
                .chain(std::iter::once(wo))
                .chain(w_gate_up.matrices.iter_mut())
                .chain(std::iter::once(w_down))
        });
        layers
            .chain(self.output.iter_mut())
            .chain(std::iter::once(&mut self.token_embd))
    }

    /// Moves every matrix into one [`Arena`] in the order a forward reads them, so that a
    /// decode streams through whole huge pages from the first layer to the output (where each
    /// matrix on its own would end in a partial page of small pages, or be one entirely when
    /// under 2 MiB). Matrices are copied one at a time, each old buffer freed as its copy is
    /// made. Nothing moves where there are no huge pages.
    fn move_into_arena(&mut self) {
        let sizes: Vec<usize> = self.matrices_mut().map(|m| m.byte_size()).collect();
        if let Some(mut arena) = Arena::for_sizes(sizes) {
            self.matrices_mut().for_each(|m| m.move_into(&mut arena));
        }
    }

    /// Bytes of weights read per decoded token (every matrix once, plus one embedding row).
    pub fn bytes_per_token(&self) -> usize {
        self.layer_bytes() + self.output_matrix().byte_size()
    }

    /// Bytes the weights hold in memory (every matrix once, the embedding included).
    pub fn byte_size(&self) -> usize {
        let output = self.output.as_ref().map_or(0, Matrix::byte_size);
        self.layer_bytes() + self.token_embd.byte_size() + output
    }

    /// Bytes of every layer's matrices.
    fn layer_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                l.wqkv.byte_size()
                    + l.w_gate_up.byte_size()
                    + l.wo.byte_size()
                    + l.w_down.byte_size()
            })
            .sum()
    }

    /// The output projection: `output`, or the token embedding when tied.
    pub(crate) fn output_matrix(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

fn tensor<'s, 'a>(source: &'s ModelSource<'a>, name: &str) -> Result<&'s RawTensor<'a>> {
    source.tensor(name).ok_or_else(|| Error::MissingTensor {
        name: name.to_string(),
    })
}

fn check_shape(t: &RawTensor<'_>, expected: &[usize]) -> Result<()> {
    if t.shape != expected {
        return Err(Error::ShapeMismatch {
            name: t.name.clone(),
            expected: expected.to_vec(),
            got: t.shape.clone(),
        });
    }
    Ok(())
}

fn vector_f32(t: &RawTensor<'_>) -> Result<Vec<f32>> {
    match t.ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            Ok(crate::quant::dequantize_bytes(t.ty, t.data))
        }
        other => Err(Error::UnsupportedTensorType {
            name: t.name.clone(),
            ggml_type: other.id(),
            type_name: format!("{} (vectors must be float)", other.name()),
        }),
    }
}

/// Row i of the half-split layout is row `result[i]` of llama.cpp's interleaved layout:
/// within a head, HF row `j * head_dim/2 + i` is GGUF row `2i + j`.
pub fn interleaved_to_half_split(n_heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..n_heads * head_dim)
        .map(|r| {
            let (h, within) = (r / head_dim, r % head_dim);
            let (j, i) = (within / half, within % half);
            h * head_dim + 2 * i + j
        })
        .collect()
}

/// RoPE inverse frequencies `1 / theta^(2i / head_dim)`, in f32 as HF computes them, with the
/// configured scaling applied.
pub fn rope_inv_freq(c: &ModelConfig) -> Vec<f32> {
    let hd = c.head_dim;
    let base: Vec<f32> = (0..hd / 2)
        .map(|i| 1.0 / libm::powf(c.rope_theta, (2 * i) as f32 / hd as f32))
        .collect();
    match &c.rope_scaling {
        None => base,
        Some(RopeScaling::Linear { factor }) => base.iter().map(|f| f / factor).collect(),
        Some(RopeScaling::Factors(factors)) => {
            base.iter().zip(factors).map(|(f, g)| f / g).collect()
        }
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_context,
        }) => {
            let old = *original_context as f32;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}
