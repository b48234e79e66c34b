//! The OpenAI request and response shapes of `inferno serve`: a request body checked field by
//! field (a wrong type or value names its field in a 400), the prompt's tokens, and the JSON
//! of replies, stream chunks, log-probabilities and errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use inferno_core::chat::ChatMessage;
use inferno_core::generate::{GenerateOptions, StopReason, TokenLogprob, DEFAULT_MAX_TOKENS};
use inferno_core::sampler::SamplerConfig;
use inferno_core::speculative::SpeculativeOptions;
use inferno_core::Engine;
use serde_json::{json, Map, Value};

use super::scheduler::Usage;

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn bad_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::bad(message)
        }
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            404 => "not_found_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.to_json())).into_response()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// A completion request, checked and tokenized.
pub struct Request {
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    /// Alternatives per token when log-probabilities are asked for.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    pub cache_prompt: bool,
}

/// The JSON object of a body (invalid UTF-8 and malformed JSON are 400s).
pub fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("the body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad("the body must be a JSON object")),
    }
}

/// Refuses a `model` other than this server's (or "default"; absent is fine).
pub fn check_model(body: &Map<String, Value>, model_id: &str) -> Result<(), ApiError> {
    match body.get("model") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(m)) if m == model_id || m == "default" || m.is_empty() => Ok(()),
        Some(Value::String(m)) => Err(ApiError {
            code: Some("model_not_found"),
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                format!("the model `{m}` does not exist; this server has `{model_id}`"),
            )
        }),
        Some(_) => Err(ApiError::bad_param("model", "`model` must be a string")),
    }
}

/// Typed access to the body's optional fields; a present field of the wrong type is a 400
/// naming it. `null` counts as absent, as in OpenAI's API.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn f32(&self, name: &str) -> Result<Option<f32>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(|x| Some(x as f32))
                .ok_or_else(|| ApiError::bad_param(name, format!("`{name}` must be a number"))),
        }
    }

    fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| ApiError::bad_param(name, format!("`{name}` must be an integer"))),
        }
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                ApiError::bad_param(name, format!("`{name}` must be true or false"))
            }),
        }
    }

    /// A number in `range`, else a 400 naming the field.
    fn f32_in(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<f32>,
    ) -> Result<Option<f32>, ApiError> {
        let v = self.f32(name)?;
        match v {
            Some(x) if !range.contains(&x) => Err(ApiError::bad_param(
                name,
                format!(
                    "`{name}` must be between {} and {}",
                    range.start(),
                    range.end()
                ),
            )),
            _ => Ok(v),
        }
    }
}

/// The text of a message's `content`: a string, or OpenAI's list of parts (text parts only).
fn content_text(content: Option<&Value>, at: usize) -> Result<String, ApiError> {
    let param = format!("messages[{at}].content");
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::bad_param(
                            &param,
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::bad_param(
            &param,
            "`content` must be a string or a list of text parts",
        )),
    }
}

/// The conversation of a chat body.
pub fn messages(body: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let Some(list) = body.get("messages") else {
        return Err(ApiError::bad_param("messages", "`messages` is required"));
    };
    let Some(list) = list.as_array() else {
        return Err(ApiError::bad_param("messages", "`messages` must be a list"));
    };
    if list.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "`messages` must not be empty",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    "each message needs a string `role`",
                )
            })?;
            let role = match role {
                "system" | "developer" => "system",
                "user" => "user",
                "assistant" => "assistant",
                other => {
                    return Err(ApiError::bad_param(
                        &format!("messages[{i}].role"),
                        format!("unknown role `{other}` (system, developer, user, assistant)"),
                    ))
                }
            };
            Ok(ChatMessage::new(role, content_text(m.get("content"), i)?))
        })
        .collect()
}

/// Checks a completion request and tokenizes its prompt.
pub fn parse(
    endpoint: Endpoint,
    body: &Map<String, Value>,
    engine: &Engine,
    default_seed: u64,
) -> Result<Request, ApiError> {
    let f = Fields(body);
    let context = engine.config().context_length;
    if let Some(n) = f.int("n")? {
        if n != 1 {
            return Err(ApiError::bad_param("n", "only `n: 1` is supported"));
        }
    }
    let prompt = match endpoint {
        Endpoint::Chat => {
            let messages = messages(body)?;
            engine
                .encode_chat(&messages, true)
                .map_err(|e| ApiError::bad_param("messages", e.to_string()))?
        }
        Endpoint::Completions => completion_prompt(body, engine)?,
    };
    if prompt.is_empty() {
        return Err(ApiError::bad("the prompt is empty"));
    }
    if prompt.len() >= context {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad(format!(
                "the prompt has {} tokens; the model's context is {context}, and a reply needs at least one more",
                prompt.len()
            ))
        });
    }
    let room = context - prompt.len();
    let max_tokens = match f.int("max_completion_tokens")?.or(f.int("max_tokens")?) {
        None => DEFAULT_MAX_TOKENS.min(room),
        Some(n) if n < 1 => {
            return Err(ApiError::bad_param(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ))
        }
        Some(n) if n as u64 > context as u64 => {
            return Err(ApiError::bad_param(
                "max_tokens",
                format!("`max_tokens` is {n}; the model's context is {context}"),
            ))
        }
        // Past the context the reply stops with finish_reason "length".
        Some(n) => n as usize,
    };

    let defaults = SamplerConfig::default();
    let top_k = match f.int("top_k")? {
        Some(k) if k < 0 => return Err(ApiError::bad_param("top_k", "`top_k` must be >= 0")),
        Some(k) => k as usize,
        None => defaults.top_k,
    };
    let seed = match f.int("seed")? {
        Some(s) => s as u64,
        None => default_seed,
    };
    let repeat_penalty = f
        .f32_in("repetition_penalty", 0.0..=10.0)?
        .or(f.f32_in("repeat_penalty", 0.0..=10.0)?);
    let sampler = SamplerConfig {
        temperature: f
            .f32_in("temperature", 0.0..=2.0)?
            .unwrap_or(defaults.temperature),
        top_k,
        top_p: match f.f32_in("top_p", 0.0..=1.0)? {
            Some(p) if p <= 0.0 => {
                return Err(ApiError::bad_param(
                    "top_p",
                    "`top_p` must be above 0 and at most 1",
                ))
            }
            p => p.unwrap_or(defaults.top_p),
        },
        min_p: f.f32_in("min_p", 0.0..=1.0)?.unwrap_or(defaults.min_p),
        repeat_penalty: repeat_penalty.unwrap_or(defaults.repeat_penalty),
        repeat_last_n: defaults.repeat_last_n,
        presence_penalty: f.f32_in("presence_penalty", -2.0..=2.0)?.unwrap_or(0.0),
        frequency_penalty: f.f32_in("frequency_penalty", -2.0..=2.0)?.unwrap_or(0.0),
        seed,
    };
    let stop = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) if list.len() <= 16 => list
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::bad_param("stop", "`stop` must be a string or a list of strings")
            })?,
        Some(_) => {
            return Err(ApiError::bad_param(
                "stop",
                "`stop` must be a string or a list of at most 16 strings",
            ))
        }
    };
    let speculative = match f.bool("speculative")? {
        Some(true) => SpeculativeOptions::default(),
        _ => SpeculativeOptions::off(),
    };
    let options = GenerateOptions {
        sampler,
        max_tokens,
        stop,
        speculative,
    };
    options
        .validate()
        .map_err(|e| ApiError::bad(e.to_string()))?;
    let logprobs = match endpoint {
        Endpoint::Chat => match f.bool("logprobs")? {
            Some(true) => match f.int("top_logprobs")? {
                Some(n) if !(0..=20).contains(&n) => {
                    return Err(ApiError::bad_param(
                        "top_logprobs",
                        "`top_logprobs` must be between 0 and 20",
                    ))
                }
                n => Some(n.unwrap_or(0) as usize),
            },
            _ => None,
        },
        Endpoint::Completions => match f.int("logprobs")? {
            Some(n) if !(0..=5).contains(&n) => {
                return Err(ApiError::bad_param(
                    "logprobs",
                    "`logprobs` must be between 0 and 5",
                ))
            }
            n => n.map(|n| n as usize),
        },
    };
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).bool("include_usage")?.unwrap_or(false),
        Some(_) => {
            return Err(ApiError::bad_param(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
    };
    Ok(Request {
        prompt,
        options,
        logprobs,
        stream: f.bool("stream")?.unwrap_or(false),
        include_usage,
        cache_prompt: f.bool("cache_prompt")?.unwrap_or(true),
    })
}

/// A completion's prompt: a string (BOS added as the model asks), or a list of token ids.
fn completion_prompt(body: &Map<String, Value>, engine: &Engine) -> Result<Vec<u32>, ApiError> {
    let vocab = engine.config().vocab_size;
    let ids = |list: &[Value]| -> Option<Vec<u32>> {
        list.iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&t| (t as usize) < vocab)
                    .map(|t| t as u32)
            })
            .collect()
    };
    let text = match body.get("prompt") {
        None => return Err(ApiError::bad_param("prompt", "`prompt` is required")),
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Array(list)) if list.len() == 1 && list[0].is_string() => {
            list[0].as_str().unwrap_or_default()
        }
        Some(Value::Array(list)) if !list.is_empty() && list.iter().all(Value::is_number) => {
            return ids(list).ok_or_else(|| {
                ApiError::bad_param(
                    "prompt",
                    format!("token ids must be integers below {vocab}"),
                )
            })
        }
        Some(_) => {
            return Err(ApiError::bad_param(
                "prompt",
                "`prompt` must be a string, a list of one string, or a list of token ids",
            ))
        }
    };
    if text.is_empty() {
        return Err(ApiError::bad_param("prompt", "`prompt` must not be empty"));
    }
    engine
        .encode_prompt(text)
        .map_err(|e| ApiError::bad_param("prompt", e.to_string()))
}

pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        _ => "stop",
    }
}

pub fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    })
}

fn token_text(engine: &Engine, id: u32) -> String {
    engine.tokenizer().decode(&[id], false).unwrap_or_default()
}

/// Chat log-probabilities: `[{token, logprob, bytes, top_logprobs: [...]}]`.
pub fn chat_logprobs(engine: &Engine, logprobs: &[TokenLogprob]) -> Value {
    let entry = |id: u32, logprob: f32| {
        let token = token_text(engine, id);
        json!({"token": token, "logprob": logprob, "bytes": token.as_bytes()})
    };
    let content: Vec<Value> = logprobs
        .iter()
        .map(|l| {
            let mut e = entry(l.id, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// Completion log-probabilities: `{tokens, token_logprobs, top_logprobs, text_offset}`, the
/// offsets counted from `offset0` (the text already returned).
pub fn completion_logprobs(engine: &Engine, logprobs: &[TokenLogprob], offset0: usize) -> Value {
    let mut offset = offset0;
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top = Vec::new();
    let mut offsets = Vec::new();
    for l in logprobs {
        let token = token_text(engine, l.id);
        offsets.push(offset);
        offset += token.len();
        tokens.push(token);
        token_logprobs.push(l.logprob);
        let alternatives: Map<String, Value> = l
            .top
            .iter()
            .map(|&(id, lp)| (token_text(engine, id), json!(lp)))
            .collect();
        top.push(Value::Object(alternatives));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    })
}
