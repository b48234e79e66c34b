//! The golden fingerprint: one hash of the reference kernels' last-position logits on the oracle
//! prompts, pinned here. Every backend equals the reference bitwise (the other tests), so a
//! change that moves them all together (a toolchain, libm or contract change) would pass those
//! and still break "same seed, same text" across versions; this test makes it fail loudly.

use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::kernels::Kernels;

use crate::{ids, oracle_prompt, ORACLE_PROMPTS};

/// FNV-1a 64 over the little-endian bytes of the f32 logits after the last token of each oracle
/// prompt, in [`ORACLE_PROMPTS`] order (reference kernels, weights as stored).
const FINGERPRINT: u64 = 0xbb22_4d60_4066_43cc;

fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn reference_kernels_last_logits_of_the_oracle_prompts_hash_to_the_pinned_fingerprint() {
    let options = EngineOptions {
        kernels: Some(Kernels::by_name("reference").expect("the reference always exists")),
        ..Default::default()
    };
    let engine = Engine::from_gguf_bytes(inferno_tests::model_bytes(), options).expect("load");
    let mut hash = 0xcbf2_9ce4_8422_2325;
    for name in ORACLE_PROMPTS {
        let mut session = engine.new_session();
        session
            .append(&ids(&oracle_prompt(name)["prompt_ids"]))
            .expect("prefill");
        let logits = session.logits().expect("logits after the prompt");
        for x in logits {
            hash = fnv1a(hash, &x.to_le_bytes());
        }
    }
    assert!(
        hash == FINGERPRINT,
        "the reference logits' fingerprint is {hash:#018x}, pinned {FINGERPRINT:#018x}.\n\
         Every backend moved together (toolchain, libm, or a change to the reduction contract or \
         the forward pass): seeded outputs are no longer the same text as the last release's.\n\
         If the change is deliberate, set FINGERPRINT in tests/tests/model/fingerprint.rs to \
         {hash:#018x} and say \"seeded outputs change\" in the release notes (README.md, \
         Correctness). If it is not, find what changed the bits."
    );
}
