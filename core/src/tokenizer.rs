//! Text <-> token ids. A [`Tokenizer`] wraps the Hugging Face `tokenizers` crate (pure Rust,
//! builds for wasm32), loaded from a tokenizer.json or built from GGUF `tokenizer.ggml.*`
//! metadata the way llama.cpp interprets it. [`StreamDecoder`] turns generated ids into text
//! piece by piece without ever splitting a UTF-8 character.

mod spm;

use std::collections::HashSet;
use std::sync::Arc;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::formats::gguf::{lookup, Value};
use crate::{Error, Result};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The llama 3 pre-tokenizer regex (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: like llama 3 but numbers split into single digits.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn tk_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{context}: {e}"))
}

/// A loaded tokenizer. Encoding never adds BOS/EOS; the engine adds BOS when the model asks.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// Recognizes special tokens in the text as single ids.
    inner: tokenizers::Tokenizer,
    /// The same tokenizer with special tokens treated as ordinary text (HF split_special_tokens):
    /// a second copy because the switch is a mutable setting and encoding must take `&self`.
    plain: tokenizers::Tokenizer,
    /// Ids of tokens marked special (skipped by `decode(.., skip_special = true)`).
    special_ids: HashSet<u32>,
    /// Number of ids, counting added tokens once (computed once: the crate rebuilds a map for it).
    vocab_size: usize,
    /// A GGUF SentencePiece (`llama`) vocabulary encodes with llama.cpp's algorithm; `inner`
    /// then only decodes.
    spm: Option<Arc<spm::Spm>>,
}

impl Tokenizer {
    /// Loads a Hugging Face tokenizer.json.
    pub fn from_json(json: &str) -> Result<Tokenizer> {
        let inner: tokenizers::Tokenizer = json.parse().map_err(|e| match bad_merge(json) {
            Some(merge) => Error::Tokenizer(format!(
                "tokenizer.json: merges refer to tokens not in the vocabulary: {merge} ({e})"
            )),
            None => tk_err("invalid tokenizer.json", e),
        })?;
        Ok(Self::wrap(inner))
    }

    fn wrap(inner: tokenizers::Tokenizer) -> Tokenizer {
        let mut plain = inner.clone();
        plain.set_encode_special_tokens(true);
        let special_ids = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special)
            .map(|(id, _)| id)
            .collect();
        let vocab_size = inner.get_vocab_size(true);
        Tokenizer {
            inner,
            plain,
            special_ids,
            vocab_size,
            spm: None,
        }
    }

    /// Builds the tokenizer from GGUF `tokenizer.ggml.*` metadata: `gpt2` (byte-level BPE) or
    /// `llama` (SentencePiece with byte fallback, encoded as llama.cpp does, in `tokenizer/spm.rs`; with
    /// `tokenizer.ggml.merges` present, a BPE over those merges instead).
    pub fn from_gguf_metadata(meta: &[(String, Value)]) -> Result<Tokenizer> {
        let model = meta_str(meta, "tokenizer.ggml.model")?;
        let tokens = meta_str_array(meta, "tokenizer.ggml.tokens")?
            .ok_or_else(|| Error::metadata("tokenizer.ggml.tokens", "missing"))?;
        let same_length = |key: &str, n: usize| {
            if n == tokens.len() {
                Ok(())
            } else {
                Err(Error::metadata(
                    key,
                    format!("{n} entries for {} tokens", tokens.len()),
                ))
            }
        };
        let token_types = meta_array(meta, "tokenizer.ggml.token_type", "integers", Value::as_i64)?;
        if let Some(types) = &token_types {
            same_length("tokenizer.ggml.token_type", types.len())?;
        }
        let merges = match meta_str_array(meta, "tokenizer.ggml.merges")? {
            Some(lines) => Some(parse_merges(&lines)?),
            None => None,
        };
        let mut spm = None;
        let mut inner = match model {
            "gpt2" => {
                let merges = merges.ok_or_else(|| {
                    Error::metadata(
                        "tokenizer.ggml.merges",
                        "missing (needed by a gpt2 tokenizer)",
                    )
                })?;
                // A missing key means llama.cpp's "default"; a value it does not know is refused
                // (as llama.cpp does), since another pre-tokenizer would give other ids.
                let pre = match lookup(meta, "tokenizer.ggml.pre") {
                    None => "default",
                    Some(v) => v.as_str().ok_or_else(|| {
                        Error::metadata(
                            "tokenizer.ggml.pre",
                            format!("expected a string, found {v:?}"),
                        )
                    })?,
                };
                build_byte_level(&tokens, merges, pre)?
            }
            "llama" => {
                let add_space_prefix = match lookup(meta, "tokenizer.ggml.add_space_prefix") {
                    None => true,
                    Some(v) => v.as_bool().ok_or_else(|| {
                        Error::metadata(
                            "tokenizer.ggml.add_space_prefix",
                            format!("expected a bool, found {v:?}"),
                        )
                    })?,
                };
                let merges = match merges {
                    Some(m) => m,
                    None => {
                        let scores =
                            meta_array(meta, "tokenizer.ggml.scores", "numbers", Value::as_f32)?
                                .ok_or_else(|| {
                                    Error::metadata(
                                        "tokenizer.ggml.scores",
                                        "missing (needed by a llama tokenizer)",
                                    )
                                })?;
                        same_length("tokenizer.ggml.scores", scores.len())?;
                        spm = Some(Arc::new(spm::Spm::new(
                            &tokens,
                            scores,
                            token_types.as_deref(),
                            add_space_prefix,
                        )));
                        // The BPE below only decodes.
                        Merges::new()
                    }
                };
                let unk = lookup(meta, "tokenizer.ggml.unknown_token_id")
                    .and_then(Value::as_u64)
                    .and_then(|id| tokens.get(id as usize).cloned())
                    .unwrap_or_else(|| "<unk>".to_string());
                build_sentencepiece(&tokens, merges, unk, add_space_prefix)?
            }
            other => {
                return Err(Error::Tokenizer(format!(
                    "unsupported GGUF tokenizer model '{other}' (supported: gpt2, llama)"
                )))
            }
        };

        // Control and user-defined tokens are matched in text as whole tokens (llama.cpp does the
        // same); only control tokens count as special. BOS/EOS/UNK are control tokens in
        // well-formed files, but mark them special even if the file says otherwise.
        let mut special_ids: HashSet<u32> = HashSet::new();
        for key in [
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.unknown_token_id",
            "tokenizer.ggml.padding_token_id",
        ] {
            if let Some(id) = lookup(meta, key).and_then(Value::as_u64) {
                if (id as usize) < tokens.len() {
                    special_ids.insert(id as u32);
                }
            }
        }
        let mut added = Vec::new();
        for (id, token) in tokens.iter().enumerate() {
            let ty = token_types
                .as_ref()
                .and_then(|t| t.get(id).copied())
                .unwrap_or(1);
            let special = ty == TOKEN_TYPE_CONTROL || special_ids.contains(&(id as u32));
            if special || ty == TOKEN_TYPE_USER_DEFINED {
                added.push(AddedToken::from(token.clone(), special));
            }
        }
        // add_tokens keeps the ids the model vocabulary already gives these strings.
        inner.add_tokens(&added);
        Ok(Tokenizer {
            spm,
            ..Self::wrap(inner)
        })
    }

    /// Encodes text with special tokens in it recognized as single ids. No BOS is added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.spm {
            Some(spm) => spm.encode(text, true),
            None => encode_with(&self.inner, text),
        }
    }

    /// Encodes text with special-token strings treated as ordinary text. No BOS is added.
    /// (A SentencePiece vocabulary's user-defined tokens still match, as in llama.cpp.)
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        match &self.spm {
            Some(spm) => spm.encode(text, false),
            None => encode_with(&self.plain, text),
        }
    }

    /// Decodes ids to text; `skip_special` drops special tokens (BOS, EOS, chat markers).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        for &id in ids {
            self.check(id)?;
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| tk_err("decode", e))
    }

    /// The vocabulary string of one id (byte-level form, e.g. `Ġworld`), if the id exists.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of one vocabulary string, if it is a single token.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The highest id the tokenizer can produce, with its token (None for an empty vocabulary).
    pub fn highest_id(&self) -> Option<(u32, String)> {
        self.inner
            .get_vocab(true)
            .into_iter()
            .max_by_key(|&(_, id)| id)
            .map(|(token, id)| (id, token))
    }

    /// Whether the id is a special token (control token in GGUF terms).
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The tokenizer as HF tokenizer.json text (what `inferno convert` writes).
    pub fn to_json(&self) -> Result<String> {
        if self.spm.is_some() {
            return Err(Error::Tokenizer(
                "a GGUF SentencePiece vocabulary without merges has no tokenizer.json form".into(),
            ));
        }
        self.inner
            .to_string(true)
            .map_err(|e| tk_err("serialize tokenizer.json", e))
    }

    fn check(&self, id: u32) -> Result<()> {
        match self.inner.id_to_token(id) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidToken {
                id,
                vocab_size: self.vocab_size,
            }),
        }
    }
}

/// The first BPE merge of a tokenizer.json whose parts or result are not in the vocabulary
/// (the crate's message names the token only), described for a message.
fn bad_merge(json: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(json).ok()?;
    let vocab = json["model"]["vocab"].as_object()?;
    let merges = json["model"]["merges"].as_array()?;
    for (i, merge) in merges.iter().enumerate() {
        // A merge is "a b" (older files) or ["a", "b"].
        let (a, b) = match merge {
            serde_json::Value::String(s) => s.split_once(' ')?,
            serde_json::Value::Array(pair) => (pair.first()?.as_str()?, pair.get(1)?.as_str()?),
            _ => return None,
        };
        let merged = format!("{a}{b}");
        for piece in [a, b, merged.as_str()] {
            if !vocab.contains_key(piece) {
                return Some(format!(
                    "merge {i} ({a:?} + {b:?}) needs {piece:?}, which is not in model.vocab"
                ));
            }
        }
    }
    None
}

fn encode_with(tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let encoding = tokenizer
        .encode(text, false)
        .map_err(|e| tk_err("encode", e))?;
    Ok(encoding.get_ids().to_vec())
}

/// The `tokenizer.ggml.pre` values [`build_byte_level`] knows.
const KNOWN_PRE: [&str; 10] = [
    "default",
    "gpt2",
    "gpt-2",
    "smollm",
    "llama3",
    "llama-bpe",
    "llama-v3",
    "smaug-bpe",
    "dbrx",
    "qwen2",
];

/// Byte-level BPE (GPT-2 style) with the pre-tokenizer llama.cpp associates with `pre`.
fn build_byte_level(tokens: &[String], merges: Merges, pre: &str) -> Result<tokenizers::Tokenizer> {
    let vocab: Vocab = tokens.iter().cloned().zip(0u32..).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tk_err("byte-level BPE", e))?;
    let byte_level = ByteLevel::new(false, true, true);
    let split = |regex: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tk_err("pre-tokenizer regex", e))?;
        Ok(PreTokenizerWrapper::Split(split))
    };
    let mut normalizer: Option<NormalizerWrapper> = None;
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        // SmolLM: numbers split into single characters, then the GPT-2 regex.
        "smollm" => PreTokenizerWrapper::Sequence(PreTokenizerSequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ])),
        "llama3" | "llama-bpe" | "llama-v3" | "smaug-bpe" | "dbrx" => {
            PreTokenizerWrapper::Sequence(PreTokenizerSequence::new(vec![
                split(LLAMA3_REGEX)?,
                PreTokenizerWrapper::ByteLevel(byte_level.use_regex(false)),
            ]))
        }
        "qwen2" => {
            normalizer = Some(NormalizerWrapper::NFC(NFC));
            PreTokenizerWrapper::Sequence(PreTokenizerSequence::new(vec![
                split(QWEN2_REGEX)?,
                PreTokenizerWrapper::ByteLevel(byte_level.use_regex(false)),
            ]))
        }
        // The GPT-2 regex inside ByteLevel.
        "gpt2" | "gpt-2" | "default" => PreTokenizerWrapper::ByteLevel(byte_level),
        other => {
            return Err(Error::metadata(
                "tokenizer.ggml.pre",
                format!(
                    "unknown pre-tokenizer '{other}' (supported: {})",
                    KNOWN_PRE.join(", ")
                ),
            ))
        }
    };
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer
        .with_normalizer(normalizer)
        .with_pre_tokenizer(Some(pre_tokenizer))
        .with_post_processor(Some(ByteLevel::new(false, true, true)))
        .with_decoder(Some(ByteLevel::new(true, true, true)));
    Ok(tokenizer)
}

/// SentencePiece BPE with byte fallback, as HF converts a llama tokenizer.model (legacy mode):
/// spaces become `▁` and, with `add_space_prefix`, one `▁` is prepended (add_dummy_prefix) and
/// stripped again when decoding.
fn build_sentencepiece(
    tokens: &[String],
    merges: Merges,
    unk: String,
    add_space_prefix: bool,
) -> Result<tokenizers::Tokenizer> {
    let vocab: Vocab = tokens.iter().cloned().zip(0u32..).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token(unk)
        .byte_fallback(true)
        .fuse_unk(true)
        .build()
        .map_err(|e| tk_err("SentencePiece BPE", e))?;
    let replace = |from: &str, to: &str| Replace::new(from, to).map_err(|e| tk_err("replace", e));
    let mut normalizers = vec![NormalizerWrapper::Replace(replace(" ", "▁")?)];
    let mut decoders = vec![
        DecoderWrapper::Replace(replace("▁", " ")?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        normalizers.insert(0, NormalizerWrapper::Prepend(Prepend::new("▁".to_string())));
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    let normalizer = NormalizerSequence::new(normalizers);
    let decoder = DecoderSequence::new(decoders);
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer
        .with_normalizer(Some(NormalizerWrapper::Sequence(normalizer)))
        .with_decoder(Some(DecoderWrapper::Sequence(decoder)));
    Ok(tokenizer)
}

fn parse_merges(lines: &[String]) -> Result<Merges> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| match line.split_once(' ') {
            Some((a, b)) => Ok((a.to_string(), b.to_string())),
            None => Err(Error::metadata(
                "tokenizer.ggml.merges",
                format!("entry {i} ('{line}') is not two tokens separated by a space"),
            )),
        })
        .collect()
}

fn meta_str<'a>(meta: &'a [(String, Value)], key: &str) -> Result<&'a str> {
    match lookup(meta, key) {
        Some(v) => v
            .as_str()
            .ok_or_else(|| Error::metadata(key, format!("expected a string, found {v:?}"))),
        None => Err(Error::metadata(key, "missing")),
    }
}

/// The elements of an array key, each converted by `convert` (`want` names the element type).
fn meta_array<T>(
    meta: &[(String, Value)],
    key: &str,
    want: &str,
    convert: impl Fn(&Value) -> Option<T>,
) -> Result<Option<Vec<T>>> {
    let Some(value) = lookup(meta, key) else {
        return Ok(None);
    };
    let items = value
        .as_array()
        .ok_or_else(|| Error::metadata(key, format!("expected an array of {want}")))?;
    items
        .iter()
        .map(|v| {
            convert(v).ok_or_else(|| Error::metadata(key, format!("expected {want}, found {v:?}")))
        })
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

fn meta_str_array(meta: &[(String, Value)], key: &str) -> Result<Option<Vec<String>>> {
    meta_array(meta, key, "strings", |v| v.as_str().map(str::to_string))
}

/// Streaming detokenizer: push generated ids one at a time, get back the text they complete.
///
/// Decoding one id alone is wrong in two ways: a byte-level (or byte-fallback) token can end in
/// the middle of a multi-byte character, and some decoders depend on context (SentencePiece
/// strips the leading space of the whole text only). So it keeps a small window: `ids[..prefix]`
/// is context already emitted, `ids[prefix..]` is pending; the new text is
/// `decode(ids) - decode(ids[..prefix])`, emitted once it does not end in U+FFFD. After an emit
/// the window slides forward, so each push decodes a few ids, never the whole generation.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix: usize,
    prefix_text: String,
    skip_special: bool,
}

/// A UTF-8 decoder settles an incomplete sequence within the next 3 bytes, and every token is
/// at least one byte: with more ids pending than this, a trailing U+FFFD may be final (stray
/// bytes, or a literal U+FFFD token), so the text up to the last 3 ids is emitted if the
/// later ids left it unchanged. This bounds the window.
const MAX_PENDING: usize = 6;
const INCOMPLETE_TAIL: usize = 3;

impl StreamDecoder {
    /// A decoder that keeps special tokens in the text (like `decode(ids, false)`).
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// A decoder that drops special tokens (like `decode(ids, true)`).
    pub fn skipping_special() -> StreamDecoder {
        StreamDecoder {
            skip_special: true,
            ..StreamDecoder::default()
        }
    }

    /// Adds one id; returns the text it completes (often empty while a character is split).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        tok.check(id)?;
        self.ids.push(id);
        let text = tok.decode(&self.ids, self.skip_special)?;
        if !text.ends_with(char::REPLACEMENT_CHARACTER) {
            return self.emit(tok, text, self.ids.len());
        }
        if self.ids.len() - self.prefix > MAX_PENDING {
            let complete = self.ids.len() - INCOMPLETE_TAIL;
            let complete_text = tok.decode(&self.ids[..complete], self.skip_special)?;
            // If the 3 later ids did not change it, its trailing U+FFFD are final.
            if text.starts_with(&complete_text) {
                return self.emit(tok, complete_text, complete);
            }
        }
        Ok(String::new())
    }

    /// Returns whatever is pending (with U+FFFD for bytes that never formed a character) and
    /// resets the decoder.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String> {
        let out = if self.ids.len() > self.prefix {
            let text = tok.decode(&self.ids, self.skip_special)?;
            new_suffix(&text, &self.prefix_text).to_string()
        } else {
            String::new()
        };
        self.ids.clear();
        self.prefix = 0;
        self.prefix_text.clear();
        Ok(out)
    }

    /// Emits `text` = decode(ids[..complete]) minus the prefix text, then makes ids[prefix..complete]
    /// the new context.
    fn emit(&mut self, tok: &Tokenizer, text: String, complete: usize) -> Result<String> {
        let out = new_suffix(&text, &self.prefix_text).to_string();
        self.ids.drain(..self.prefix);
        self.prefix = complete - self.prefix;
        self.prefix_text = tok.decode(&self.ids[..self.prefix], self.skip_special)?;
        Ok(out)
    }
}

/// `text` minus `prefix`. The decoders in use never rewrite earlier text once it ends in a whole
/// character; if one ever does, emit from the first difference rather than fail the generation.
fn new_suffix<'a>(text: &'a str, prefix: &str) -> &'a str {
    if let Some(rest) = text.strip_prefix(prefix) {
        return rest;
    }
    let mut common = 0;
    for ((i, a), b) in text.char_indices().zip(prefix.chars()) {
        if a != b {
            break;
        }
        common = i + a.len_utf8();
    }
    &text[common..]
}
