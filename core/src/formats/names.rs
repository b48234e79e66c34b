//! Tensor-name maps between Hugging Face checkpoints and the canonical (GGUF) names the model
//! loader reads. One table, read in both directions, so the two maps cannot drift apart.

/// Per-layer tensors: HF suffix after `model.layers.N.` <-> GGUF suffix after `blk.N.`.
const LAYER_NAMES: [(&str, &str); 17] = [
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.bias", "attn_output.bias"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
    ("mlp.gate_proj.bias", "ffn_gate.bias"),
    ("mlp.down_proj.bias", "ffn_down.bias"),
];

/// Tensors outside the layers.
const GLOBAL_NAMES: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// Splits `prefix` + layer number + `.` + rest.
pub(crate) fn split_layer<'n>(name: &'n str, prefix: &str) -> Option<(usize, &'n str)> {
    let rest = name.strip_prefix(prefix)?;
    let (layer, suffix) = rest.split_once('.')?;
    // Reject "01" or "+1" so that the map is one-to-one.
    if layer.is_empty()
        || !layer.bytes().all(|b| b.is_ascii_digit())
        || (layer.len() > 1 && layer.starts_with('0'))
    {
        return None;
    }
    Some((layer.parse().ok()?, suffix))
}

/// The GGUF name of an HF tensor, or `None` for tensors the model does not use
/// (e.g. `rotary_emb.inv_freq`).
pub fn hf_to_gguf(hf: &str) -> Option<String> {
    if let Some(&(_, gguf)) = GLOBAL_NAMES.iter().find(|(h, _)| *h == hf) {
        return Some(gguf.to_string());
    }
    let (layer, suffix) = split_layer(hf, "model.layers.")?;
    let &(_, gguf) = LAYER_NAMES.iter().find(|(h, _)| *h == suffix)?;
    Some(format!("blk.{layer}.{gguf}"))
}

/// The HF name of a GGUF tensor, or `None` for a name with no HF counterpart.
pub fn gguf_to_hf(gguf: &str) -> Option<String> {
    if let Some(&(hf, _)) = GLOBAL_NAMES.iter().find(|(_, g)| *g == gguf) {
        return Some(hf.to_string());
    }
    let (layer, suffix) = split_layer(gguf, "blk.")?;
    let &(hf, _) = LAYER_NAMES.iter().find(|(_, g)| *g == suffix)?;
    Some(format!("model.layers.{layer}.{hf}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_entry_maps_both_ways_for_layer_0_and_29() {
        for layer in [0, 29] {
            for (hf, gguf) in LAYER_NAMES {
                let hf = format!("model.layers.{layer}.{hf}");
                let gguf = format!("blk.{layer}.{gguf}");
                assert_eq!(hf_to_gguf(&hf).as_deref(), Some(gguf.as_str()));
                assert_eq!(gguf_to_hf(&gguf).as_deref(), Some(hf.as_str()));
            }
        }
        for (hf, gguf) in GLOBAL_NAMES {
            assert_eq!(hf_to_gguf(hf).as_deref(), Some(gguf));
            assert_eq!(gguf_to_hf(gguf).as_deref(), Some(hf));
        }
    }

    #[test]
    fn unknown_and_malformed_names_map_to_none() {
        for name in [
            "model.layers.0.self_attn.rotary_emb.inv_freq",
            "model.layers.x.mlp.up_proj.weight",
            "model.layers.01.mlp.up_proj.weight",
            "model.layers..mlp.up_proj.weight",
            "model.layers.0",
            "",
        ] {
            assert_eq!(hf_to_gguf(name), None, "{name}");
        }
        for name in [
            "blk.0.attn_qkv.weight",
            "blk.-1.attn_q.weight",
            "rope_freqs.weight",
            "blk.",
        ] {
            assert_eq!(gguf_to_hf(name), None, "{name}");
        }
    }
}
