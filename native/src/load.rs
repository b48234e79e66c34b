//! Opening a model from the file system: a GGUF file (memory-mapped) or a Hugging Face
//! directory (config.json, safetensors shards, tokenizer files). Core only ever sees bytes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use inferno_core::engine::{Engine, EngineOptions};
use inferno_core::formats::gguf::GgufFile;
use inferno_core::formats::hf_dir::{self, HfFiles};
use inferno_core::formats::{ModelSource, Release};
use memmap2::Mmap;

/// The file `make run` and the tests fetch (scripts/fetch-model.sh).
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("INFERNO_MODEL") {
        return PathBuf::from(p);
    }
    let cache = match std::env::var_os("INFERNO_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/inferno"),
    };
    cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// A model's bytes, kept alive while the engine is built.
pub enum ModelFiles {
    Gguf(Mmap),
    Hf {
        config_json: String,
        shards: Vec<Mmap>,
        tokenizer_json: Option<String>,
        tokenizer_config_json: Option<String>,
        chat_template: Option<String>,
    },
}

fn map(path: &Path) -> Result<Mmap> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: the map is read-only and private to this process; inferno copies every tensor out
    // of it at load. A file truncated by another process while mapped could fault, as with any
    // memory-mapped reader; that is the documented limit of mmap.
    let map =
        unsafe { Mmap::map(&file) }.with_context(|| format!("cannot map {}", path.display()))?;
    Ok(map)
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            Ok(Some(String::from_utf8(bytes).with_context(|| {
                format!("{} is not UTF-8", path.display())
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

impl ModelFiles {
    pub fn open(path: &Path) -> Result<ModelFiles> {
        if !path.exists() {
            if path == default_model_path() {
                bail!(
                    "model file {} not found: run `make run` or scripts/fetch-model.sh to fetch it",
                    path.display()
                );
            }
            bail!("model {} not found", path.display());
        }
        if !path.is_dir() {
            return Ok(ModelFiles::Gguf(map(path)?));
        }
        let config_json = read_optional(&path.join("config.json"))?
            .with_context(|| format!("{} has no config.json", path.display()))?;
        let shard_names = match read_optional(&path.join("model.safetensors.index.json"))? {
            Some(index) => hf_dir::shard_names(&index)?,
            None => vec!["model.safetensors".to_string()],
        };
        let shards = shard_names
            .iter()
            .map(|n| map(&path.join(n)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ModelFiles::Hf {
            config_json,
            shards,
            tokenizer_json: read_optional(&path.join("tokenizer.json"))?,
            tokenizer_config_json: read_optional(&path.join("tokenizer_config.json"))?,
            chat_template: read_optional(&path.join("chat_template.jinja"))?,
        })
    }

    /// Parses the files and calls `f` with the format-independent source.
    pub fn with_source<T>(&self, f: impl FnOnce(&ModelSource<'_>) -> Result<T>) -> Result<T> {
        match self {
            ModelFiles::Gguf(map) => {
                let file = GgufFile::parse(map)?;
                let release = |bytes: &[u8]| drop_pages(std::slice::from_ref(map), bytes);
                let mut source = ModelSource::from_gguf(&file)?;
                source.release = Release(Some(&release));
                f(&source)
            }
            ModelFiles::Hf {
                config_json,
                shards,
                tokenizer_json,
                tokenizer_config_json,
                chat_template,
            } => {
                let files = HfFiles {
                    config_json: config_json.clone(),
                    shards: shards.iter().map(|m| &m[..]).collect(),
                    tokenizer_json: tokenizer_json.clone(),
                    tokenizer_config_json: tokenizer_config_json.clone(),
                    chat_template: chat_template.clone(),
                };
                let release = |bytes: &[u8]| drop_pages(shards, bytes);
                let mut source = ModelSource::from_hf(&files)?;
                source.release = Release(Some(&release));
                f(&source)
            }
        }
    }
}

/// Gives back to the OS the whole pages of `bytes` (a tensor already copied into the weights)
/// in whichever of `maps` holds it, so the file's pages and the weights are not resident
/// together during a load. Best effort: an error only means the pages stay until the map goes.
fn drop_pages(maps: &[Mmap], bytes: &[u8]) {
    #[cfg(unix)]
    {
        const PAGE: usize = 4096;
        let at = bytes.as_ptr() as usize;
        let Some(map) = maps
            .iter()
            .find(|m| (m.as_ptr() as usize..m.as_ptr() as usize + m.len()).contains(&at))
        else {
            return;
        };
        let offset = at - map.as_ptr() as usize;
        // Whole pages inside the tensor only: its neighbours may not be loaded yet.
        let start = offset.next_multiple_of(PAGE);
        let end = (offset + bytes.len()) / PAGE * PAGE;
        if end > start {
            // SAFETY: the map is private and read-only, so MADV_DONTNEED only drops clean
            // file pages; a later read of them (none is made: the weights own their copy)
            // would fault them in again from the file, unchanged.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
    #[cfg(not(unix))]
    let _ = (maps, bytes);
}

/// Opens and loads a model, with a progress bar on a terminal.
pub fn load_engine(path: &Path, options: EngineOptions) -> Result<Engine> {
    let files = ModelFiles::open(path)?;
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} tensors")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        Some(bar)
    } else {
        None
    };
    let engine = files.with_source(|source| {
        let mut progress = |done: usize, total: usize| {
            if let Some(bar) = &bar {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
        };
        Ok(Engine::from_source_with_progress(
            source,
            options,
            &mut progress,
        )?)
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    engine.with_context(|| format!("cannot load model {}", path.display()))
}
