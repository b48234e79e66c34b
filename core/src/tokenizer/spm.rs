//! SentencePiece encoding as llama.cpp runs a GGUF `llama` vocabulary (`llm_tokenizer_spm` and
//! `tokenizer_st_partition` in llama-vocab.cpp), written here so the ids are llama.cpp's:
//! control, user-defined and unknown tokens are cut out of the text first (longest first), then
//! each remaining fragment is split into characters and the adjacent pair whose concatenation
//! is the highest-scoring vocabulary piece is merged, again and again; characters that never
//! become a piece are spelled as `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::{Error, Result};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`) that are matched in
/// raw text as whole tokens.
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// A SentencePiece vocabulary ready to encode.
pub(crate) struct Spm {
    /// Piece text -> id; for a text listed twice, the later id (as llama.cpp's `token_to_id`).
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    /// Tokens matched in raw text before splitting, longest first (ties by id): (text, id,
    /// whether only when special tokens are parsed, i.e. control and unknown tokens).
    specials: Vec<(String, u32, bool)>,
    /// The id of each byte's `<0xXX>` token (or of the one-byte piece).
    byte_ids: [Option<u32>; 256],
    /// Prepend a space to a fragment at the start or after a special token (metadata
    /// `tokenizer.ggml.add_space_prefix`, llama.cpp's default true).
    add_space_prefix: bool,
}

impl std::fmt::Debug for Spm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Spm({} pieces, {} specials)",
            self.scores.len(),
            self.specials.len()
        )
    }
}

/// A piece of text being merged: `text[start .. start + len]`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of two adjacent symbols into a vocabulary piece.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Bytes of the merged piece: a stale candidate (one side changed since) no longer matches.
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// The highest score first; equal scores leftmost first (llama.cpp's `llm_bigram_spm`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A part of the text after special tokens are cut out.
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

impl Spm {
    pub(crate) fn new(
        tokens: &[String],
        scores: Vec<f32>,
        types: Option<&[i64]>,
        add_space_prefix: bool,
    ) -> Spm {
        let mut ids = HashMap::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for (id, token) in (0u32..).zip(tokens) {
            ids.insert(token.clone(), id);
            let ty = types.and_then(|t| t.get(id as usize).copied()).unwrap_or(1);
            if !token.is_empty() && matches!(ty, TYPE_UNKNOWN | TYPE_CONTROL | TYPE_USER_DEFINED) {
                specials.push((token.clone(), id, ty != TYPE_USER_DEFINED));
            }
        }
        // llama.cpp sorts by length only (std::sort, so equal lengths in no set order); ids
        // break the tie here so the result never depends on a sort's whims.
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = ids
                .get(format!("<0x{b:02X}>").as_str())
                .copied()
                .or_else(|| {
                    let one = [b as u8];
                    std::str::from_utf8(&one)
                        .ok()
                        .and_then(|s| ids.get(s).copied())
                });
        }
        Spm {
            ids,
            scores,
            specials,
            byte_ids,
            add_space_prefix,
        }
    }

    /// The ids of `text`, no BOS. `parse_special`: control and unknown token texts become
    /// their ids (user-defined ones always do, as in llama.cpp).
    pub(crate) fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        // A fragment at the start counts as following a special token (llama.cpp: BOS or not).
        let mut prev_special = true;
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(raw) => {
                    let mut piece = String::with_capacity(raw.len() + 3);
                    if self.add_space_prefix && prev_special {
                        piece.push(' ');
                    }
                    piece.push_str(raw);
                    self.encode_fragment(&piece.replace(' ', "▁"), &mut out)?;
                    prev_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Cuts every special token's occurrences out of the text fragments, one token at a time,
    /// longest first, each left to right.
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut fragments = vec![Fragment::Text(text)];
        if text.is_empty() {
            return Vec::new();
        }
        for (special, id, only_when_parsing) in &self.specials {
            if *only_when_parsing && !parse_special {
                continue;
            }
            if !text.contains(special.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(special.as_str()) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(*id));
                    rest = &rest[at + special.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// One fragment (spaces already `▁`): characters, merged by score, then pieces or bytes.
    fn encode_fragment(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            });
        }
        let Some(last) = symbols.last_mut() else {
            return Ok(());
        };
        last.next = None;

        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<Bigram>,
                    symbols: &[Symbol],
                    left: Option<usize>,
                    right: Option<usize>| {
            let (Some(left), Some(right)) = (left, right) else {
                return;
            };
            let (l, r): (&Symbol, &Symbol) = (&symbols[left], &symbols[right]);
            let len = l.len + r.len;
            if let Some(&id) = self.ids.get(&text[l.start..l.start + len]) {
                queue.push(Bigram {
                    score: self.scores[id as usize],
                    left,
                    right,
                    len,
                });
            }
        };
        for i in 1..symbols.len() {
            push(&mut queue, &symbols, Some(i - 1), Some(i));
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            // Merge the right symbol into the left one and unlink it.
            symbols[b.left].len = b.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            push(&mut queue, &symbols, l.prev, Some(b.left));
            push(&mut queue, &symbols, Some(b.left), r.next);
        }

        // Every merged symbol is a piece (a merge needs one); a character that is not becomes
        // bytes. (llama.cpp's resegment also looks the text up in its merge history, which only
        // ever holds texts that are pieces.)
        let mut at = Some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        out.push(self.byte_ids[b as usize].ok_or_else(|| {
                            Error::Tokenizer(format!(
                                "no byte token <0x{b:02X}> for a character outside the vocabulary"
                            ))
                        })?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }
}
