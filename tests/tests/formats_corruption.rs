//! Hostile GGUF input: the real model's header region and a synthetic model, truncated and
//! bit-flipped at deterministic offsets, and with length fields set to absurd values. Parsing
//! must return (Ok or Err) without panicking and without believing a length it cannot back.

use inferno_core::formats::gguf::GgufFile;
use inferno_core::formats::ModelSource;
use inferno_core::quant::GgmlType;
use inferno_core::Error;
use inferno_tests::{model_bytes, synthetic_gguf, SplitMix64, SyntheticShape};

/// `n` deterministic offsets in `0..len`, plus every offset of the first 64 bytes.
fn offsets(seed: u64, len: usize, n: usize) -> Vec<usize> {
    let mut rng = SplitMix64(seed);
    let mut out: Vec<usize> = (0..64.min(len)).collect();
    out.extend((0..n).map(|_| (rng.next_u64() % len as u64) as usize));
    out
}

/// Parses, and if that succeeds builds the ModelSource too (which reads config and tokens).
fn parse_all(bytes: &[u8]) -> bool {
    match GgufFile::parse(bytes) {
        Ok(file) => ModelSource::from_gguf(&file).is_ok(),
        Err(_) => false,
    }
}

fn header_end(bytes: &[u8]) -> usize {
    GgufFile::parse(bytes).unwrap().data_offset as usize
}

#[test]
fn real_model_first_2mb_truncated_at_200_offsets_is_err() {
    let prefix = &model_bytes()[..2 << 20];
    for len in offsets(1, prefix.len(), 200) {
        // Even the whole 2 MB prefix lacks the tensor data, so every cut is an error.
        assert!(GgufFile::parse(&prefix[..len]).is_err(), "cut at {len}");
    }
}

#[test]
fn real_model_header_flipped_at_150_offsets_with_masks_1_80_ff_never_panics() {
    // The whole file, so that an undamaged parse goes on to the config and tokenizer.
    let mut bytes = model_bytes().to_vec();
    let end = header_end(&bytes);
    for (i, at) in offsets(2, end, 150).into_iter().enumerate() {
        let mask = [0x01u8, 0x80, 0xFF][i % 3];
        bytes[at] ^= mask;
        let _ = parse_all(&bytes);
        bytes[at] ^= mask;
    }
}

/// Offset just after the key `key` (where its type id starts).
fn after_key(bytes: &[u8], key: &str) -> usize {
    let mut pattern = (key.len() as u64).to_le_bytes().to_vec();
    pattern.extend_from_slice(key.as_bytes());
    bytes
        .windows(pattern.len())
        .position(|w| w == pattern.as_slice())
        .unwrap()
        + pattern.len()
}

#[test]
fn real_model_token_array_count_and_first_token_length_set_to_0xffff_ffff_ffff_is_truncated() {
    let header = &model_bytes()[..header_end(model_bytes())];
    let at = after_key(header, "tokenizer.ggml.tokens");
    // type id (4) + element type (4), then the u64 count, then the first string's u64 length.
    for field in [at + 8, at + 16] {
        let mut bytes = header.to_vec();
        bytes[field..field + 8].copy_from_slice(&0xFFFF_FFFF_FFFFu64.to_le_bytes());
        assert!(
            matches!(GgufFile::parse(&bytes), Err(Error::Truncated { .. })),
            "field at {field}"
        );
    }
}

#[test]
fn real_model_tensor_type_patched_to_iq2_xxs_is_named() {
    let header = &model_bytes()[..header_end(model_bytes())];
    let at = after_key(header, "token_embd.weight");
    // n_dims (4) + 2 dims (16), then the type id.
    let mut bytes = model_bytes().to_vec();
    assert_eq!(bytes[at..at + 4], 2u32.to_le_bytes());
    bytes[at + 20..at + 24].copy_from_slice(&16u32.to_le_bytes());
    match GgufFile::parse(&bytes) {
        Err(Error::UnsupportedTensorType {
            name,
            ggml_type,
            type_name,
        }) => {
            assert_eq!(
                (name.as_str(), ggml_type, type_name.as_str()),
                ("token_embd.weight", 16, "IQ2_XXS")
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn synthetic_tiny_q4_0_truncated_at_100_offsets_and_flipped_at_100_never_panics() {
    let bytes = synthetic_gguf(&SyntheticShape::tiny(), 3, GgmlType::Q4_0);
    assert!(parse_all(&bytes));
    for len in offsets(4, bytes.len(), 100) {
        assert!(GgufFile::parse(&bytes[..len]).is_err(), "cut at {len}");
    }
    let mut b = bytes.clone();
    let end = header_end(&bytes);
    for (i, at) in offsets(5, end, 100).into_iter().enumerate() {
        let mask = [0x01u8, 0x10, 0xFF][i % 3];
        b[at] ^= mask;
        let _ = parse_all(&b);
        b[at] ^= mask;
    }
}
