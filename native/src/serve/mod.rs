//! `inferno serve`: an OpenAI-compatible HTTP server. HTTP (axum on a small tokio runtime)
//! checks and tokenizes requests and streams their replies; one engine thread
//! (`scheduler.rs`) decodes every active request together, one batched forward per step, with
//! prefix reuse and compose. The page (www/) is served at `/`, the npm package at `/inferno/`
//! and the model at `/model.gguf`, so a browser pointed at the server is the chat app.
//!
//! Endpoints: POST /v1/chat/completions, /v1/completions (SSE or JSON), /v1/compose; GET
//! /v1/models, /health, /metrics.

mod api;
mod metrics;
mod scheduler;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use inferno_core::chat_session::chat_draft_tokens;
use inferno_core::Engine;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

use api::{ApiError, Endpoint};
use metrics::Metrics;
use scheduler::{Event, Job, Work};

/// How the server runs (the `inferno serve` flags).
pub struct ServeOptions {
    pub model_path: PathBuf,
    pub host: String,
    pub port: u16,
    pub parallel: usize,
    pub ctx_budget: usize,
    pub max_body: usize,
    pub timeout: Duration,
    pub header_timeout: Duration,
    /// The chat page's directory (www/); the npm package is its sibling npm/.
    pub www: Option<PathBuf>,
}

struct AppState {
    engine: Engine,
    model_id: String,
    jobs: Sender<Job>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
    max_body: usize,
    body_timeout: Duration,
    timeout: Duration,
    budget: usize,
    ids: AtomicU64,
}

type Shared = Arc<AppState>;

/// Loads nothing itself: runs the server on `engine` until SIGINT or SIGTERM.
pub fn serve(engine: Engine, options: ServeOptions) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    metrics
        .kv_budget_bytes
        .store(options.ctx_budget as u64, Ordering::Relaxed);
    let stopping = Arc::new(AtomicBool::new(false));
    let (jobs, receiver) = std::sync::mpsc::channel();
    let config = scheduler::Config {
        parallel: options.parallel.max(1),
        budget: options.ctx_budget,
        prefill_chunk: 256,
    };
    let engine_thread = {
        let (engine, metrics, stopping) = (engine.clone(), metrics.clone(), stopping.clone());
        std::thread::Builder::new()
            .name("inferno-engine".into())
            .spawn(move || scheduler::run(engine, config, receiver, metrics, stopping))
            .context("cannot start the engine thread")?
    };
    let model_id = options
        .model_path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_else(|| "model".into());
    let state = Arc::new(AppState {
        engine,
        model_id,
        jobs,
        metrics,
        stopping: stopping.clone(),
        max_body: options.max_body,
        body_timeout: options.header_timeout.max(Duration::from_secs(5)),
        timeout: options.timeout,
        budget: options.ctx_budget,
        ids: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    let result = runtime.block_on(http(state.clone(), &options));
    // Dropping the state drops the last job sender: the engine thread ends.
    stopping.store(true, Ordering::Relaxed);
    drop(state);
    runtime.shutdown_timeout(Duration::from_secs(2));
    let _ = engine_thread.join();
    result
}

fn router(state: Shared, options: &ServeOptions) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/compose", post(compose))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this path",
            )
        })
        .with_state(state);
    let not_found = || {
        axum::routing::any(|request: Request| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no such path: {}", request.uri().path()),
            )
        })
    };
    let Some(www) = options.www.clone().filter(|w| w.is_dir()) else {
        return api.fallback(not_found());
    };
    let npm = www.join("../npm");
    let page = Router::new()
        .nest_service("/inferno", ServeDir::new(npm).fallback(not_found()))
        .route_service("/model.gguf", ServeFile::new(&options.model_path))
        .fallback_service(ServeDir::new(www).fallback(not_found()))
        // Cross-origin isolation: what lets the page's in-tab engine use wasm threads.
        .layer(SetResponseHeaderLayer::overriding(
            header::HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::HeaderName::from_static("cross-origin-embedder-policy"),
            HeaderValue::from_static("require-corp"),
        ));
    api.merge(page)
}

/// Accepts connections until a signal, then lets running requests end (they are cancelled by
/// the engine thread) for a few seconds.
async fn http(state: Shared, options: &ServeOptions) -> Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let app = router(state.clone(), options);
    let addr: SocketAddr = format!("{}:{}", options.host, options.port)
        .parse()
        .with_context(|| format!("bad --host {}", options.host))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    println!("inferno serve: listening on http://{local}");
    eprintln!(
        "inferno serve: model {} at http://{local}/v1 (chat page at http://{local}/)",
        state.model_id
    );
    let graceful = GracefulShutdown::new();
    let mut signal = std::pin::pin!(shutdown_signal());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors and the like: wait, do not spin.
                        eprintln!("inferno serve: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(options.header_timeout)
                    // Headers past 64 KiB get 431 instead of hyper's 400 KiB default buffer.
                    .max_buf_size(64 * 1024)
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
            _ = &mut signal => break,
        }
    }
    eprintln!("inferno serve: shutting down");
    state.stopping.store(true, Ordering::Relaxed);
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
    }
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn models(State(state): State<Shared>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": 0,
            "owned_by": "inferno",
            "context_length": state.engine.config().context_length,
        }],
    }))
}

/// The body's bytes: at most `max_body` (413 past it), within the body timeout (408).
async fn read_body(state: &AppState, request: Request) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", state.max_body),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > state.max_body as u64) {
        return Err(too_large());
    }
    let read = axum::body::to_bytes(request.into_body(), state.max_body);
    match tokio::time::timeout(state.body_timeout, read).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
        Ok(Ok(bytes)) => Ok(bytes.to_vec()),
        Ok(Err(e)) => {
            let limit = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if limit || e.to_string().contains("length limit") {
                Err(too_large())
            } else {
                Err(ApiError::bad(format!("cannot read the body: {e}")))
            }
        }
    }
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A seed for requests without one: different for every request, as OpenAI's.
fn fresh_seed(state: &AppState) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos
        ^ state
            .ids
            .load(Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

async fn chat(State(state): State<Shared>, request: Request) -> Response {
    complete(state, Endpoint::Chat, request).await
}

async fn completions(State(state): State<Shared>, request: Request) -> Response {
    complete(state, Endpoint::Completions, request).await
}

fn failed(state: &AppState, error: ApiError) -> Response {
    state.metrics.failed.fetch_add(1, Ordering::Relaxed);
    error.into_response()
}

/// Hands a job to the engine thread.
fn submit(state: &AppState, job: Job) -> Result<(), ApiError> {
    if state.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
        ));
    }
    state.jobs.send(job).map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine thread has stopped",
        )
    })
}

async fn complete(state: Shared, endpoint: Endpoint, request: Request) -> Response {
    state.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let parsed = async {
        let body = read_body(&state, request).await?;
        let body = api::body_object(&body)?;
        api::check_model(&body, &state.model_id)?;
        api::parse(endpoint, &body, &state.engine, fresh_seed(&state))
    }
    .await;
    let request = match parsed {
        Ok(r) => r,
        Err(e) => return failed(&state, e),
    };
    let context = state.engine.config().context_length;
    let positions = (request.prompt.len() + request.options.max_tokens + 1).min(context);
    let per_position = state.engine.new_session().cache_bytes_per_position();
    if positions * per_position > state.budget {
        return failed(
            &state,
            ApiError::bad(format!(
                "the request needs {} bytes of KV cache ({positions} positions), more than the server's budget of {} (--ctx-budget); ask for fewer max_tokens",
                positions * per_position,
                state.budget
            )),
        );
    }
    state
        .metrics
        .prompt_tokens
        .fetch_add(request.prompt.len() as u64, Ordering::Relaxed);
    let (events, receiver) = unbounded_channel();
    let job = Job {
        work: Work::Generate {
            options: request.options.clone(),
            logprobs: request.logprobs,
        },
        prompt: request.prompt.clone(),
        cache_prompt: request.cache_prompt,
        positions,
        events,
        deadline: Instant::now() + state.timeout,
    };
    if let Err(e) = submit(&state, job) {
        return failed(&state, e);
    }
    let id = state.ids.fetch_add(1, Ordering::Relaxed);
    let reply = ReplyShape {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{id}"),
            Endpoint::Completions => format!("cmpl-{id}"),
        },
        created: now_seconds(),
        model: state.model_id.clone(),
        endpoint,
        logprobs: request.logprobs.is_some(),
        include_usage: request.include_usage,
    };
    if request.stream {
        stream_reply(state, reply, receiver).into_response()
    } else {
        whole_reply(state, reply, receiver).await
    }
}

/// What every chunk or reply of one request repeats.
struct ReplyShape {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
    logprobs: bool,
    include_usage: bool,
}

impl ReplyShape {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completions, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": concat!("inferno-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        })
    }
}

fn failure_status(message: &str) -> StatusCode {
    if message.contains("shutting down") {
        StatusCode::SERVICE_UNAVAILABLE
    } else if message.contains("timed out") {
        StatusCode::REQUEST_TIMEOUT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

async fn whole_reply(
    state: Shared,
    reply: ReplyShape,
    mut receiver: UnboundedReceiver<Event>,
) -> Response {
    let engine = &state.engine;
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = receiver.recv().await {
        match event {
            Event::Delta {
                text: piece,
                logprobs: l,
            } => {
                text.push_str(&piece);
                logprobs.extend(l);
            }
            Event::Done { stop, usage } => {
                let finish = api::finish_reason(stop);
                let choice = match reply.endpoint {
                    Endpoint::Chat => json!({
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": reply.logprobs.then(|| api::chat_logprobs(engine, &logprobs)),
                        "finish_reason": finish,
                    }),
                    Endpoint::Completions => json!({
                        "index": 0,
                        "text": text,
                        "logprobs": reply.logprobs.then(|| api::completion_logprobs(engine, &logprobs, 0)),
                        "finish_reason": finish,
                    }),
                };
                let mut body = reply.envelope(false, json!([choice]));
                body["usage"] = api::usage_json(&usage);
                return Json(body).into_response();
            }
            Event::Failed(message) => {
                return failed(&state, ApiError::new(failure_status(&message), message));
            }
            Event::Composed { .. } => {}
        }
    }
    failed(
        &state,
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine thread stopped",
        ),
    )
}

/// Where a stream is: the role chunk (chat) first, then the engine's events, then usage and
/// `[DONE]`.
enum Phase {
    Start,
    Events,
    Usage(Value),
    Done,
    End,
}

fn stream_reply(
    state: Shared,
    reply: ReplyShape,
    receiver: UnboundedReceiver<Event>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let start = (state, reply, receiver, Phase::Start, 0usize);
    let events = stream::unfold(
        start,
        |(state, reply, mut receiver, phase, offset)| async move {
            let data = |v: Value| SseEvent::default().data(v.to_string());
            match phase {
                Phase::Start if reply.endpoint == Endpoint::Chat => {
                    let choice = json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]);
                    let event = data(reply.envelope(true, choice));
                    Some((Ok(event), (state, reply, receiver, Phase::Events, offset)))
                }
                Phase::Start | Phase::Events => loop {
                    let Some(event) = receiver.recv().await else {
                        let error = ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "the engine thread stopped",
                        );
                        return Some((
                            Ok(data(error.to_json())),
                            (state, reply, receiver, Phase::Done, offset),
                        ));
                    };
                    match event {
                        Event::Delta { text, logprobs } => {
                            let engine = &state.engine;
                            let choice = match reply.endpoint {
                                Endpoint::Chat => json!({
                                    "index": 0,
                                    "delta": {"content": text},
                                    "logprobs": reply.logprobs.then(|| api::chat_logprobs(engine, &logprobs)),
                                    "finish_reason": null,
                                }),
                                Endpoint::Completions => json!({
                                    "index": 0,
                                    "text": text,
                                    "logprobs": reply.logprobs.then(|| api::completion_logprobs(engine, &logprobs, offset)),
                                    "finish_reason": null,
                                }),
                            };
                            let offset = offset + text.len();
                            let event = data(reply.envelope(true, json!([choice])));
                            return Some((
                                Ok(event),
                                (state, reply, receiver, Phase::Events, offset),
                            ));
                        }
                        Event::Done { stop, usage } => {
                            let finish = api::finish_reason(stop);
                            let choice = match reply.endpoint {
                                Endpoint::Chat => {
                                    json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish})
                                }
                                Endpoint::Completions => {
                                    json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish})
                                }
                            };
                            let event = data(reply.envelope(true, json!([choice])));
                            let next = if reply.include_usage {
                                let mut last = reply.envelope(true, json!([]));
                                last["usage"] = api::usage_json(&usage);
                                Phase::Usage(last)
                            } else {
                                Phase::Done
                            };
                            return Some((Ok(event), (state, reply, receiver, next, offset)));
                        }
                        Event::Failed(message) => {
                            state.metrics.failed.fetch_add(1, Ordering::Relaxed);
                            let error = ApiError::new(failure_status(&message), message);
                            return Some((
                                Ok(data(error.to_json())),
                                (state, reply, receiver, Phase::Done, offset),
                            ));
                        }
                        Event::Composed { .. } => continue,
                    }
                },
                Phase::Usage(last) => Some((
                    Ok(data(last)),
                    (state, reply, receiver, Phase::Done, offset),
                )),
                Phase::Done => Some((
                    Ok(SseEvent::default().data("[DONE]")),
                    (state, reply, receiver, Phase::End, offset),
                )),
                Phase::End => None,
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// POST /v1/compose {messages, draft}: prefills the conversation with the draft as the next
/// user message while the user types; the chat request that follows continues from it.
async fn compose(State(state): State<Shared>, request: Request) -> Response {
    state.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let parsed = async {
        let body = read_body(&state, request).await?;
        let body = api::body_object(&body)?;
        api::check_model(&body, &state.model_id)?;
        let history = match body.get("messages") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) if list.is_empty() => Vec::new(),
            Some(_) => api::messages(&body)?,
        };
        let draft = match body.get("draft") {
            Some(Value::String(d)) => d.clone(),
            _ => return Err(ApiError::bad_param("draft", "`draft` must be a string")),
        };
        chat_draft_tokens(&state.engine, &history, &draft).map_err(|e| ApiError::bad(e.to_string()))
    }
    .await;
    let tokens = match parsed {
        Ok(Some(tokens)) if !tokens.is_empty() => tokens,
        Ok(_) => return Json(json!({"reused": 0, "prefilled": 0, "tokens": 0})).into_response(),
        Err(e) => return failed(&state, e),
    };
    let per_position = state.engine.new_session().cache_bytes_per_position();
    if tokens.len() * per_position > state.budget {
        return failed(
            &state,
            ApiError::bad("the draft does not fit the KV budget"),
        );
    }
    let (events, mut receiver) = unbounded_channel();
    let count = tokens.len();
    let job = Job {
        work: Work::Compose,
        positions: count,
        prompt: tokens,
        cache_prompt: true,
        events,
        deadline: Instant::now() + state.timeout,
    };
    if let Err(e) = submit(&state, job) {
        return failed(&state, e);
    }
    while let Some(event) = receiver.recv().await {
        match event {
            Event::Composed { reused, prefilled } => {
                return Json(json!({"reused": reused, "prefilled": prefilled, "tokens": count}))
                    .into_response()
            }
            Event::Failed(message) => {
                return failed(&state, ApiError::new(failure_status(&message), message))
            }
            _ => {}
        }
    }
    failed(
        &state,
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine thread stopped",
        ),
    )
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("model_path", &self.model_path)
            .field("port", &self.port)
            .finish()
    }
}

/// A byte count with an optional K, M or G suffix (powers of 1024): `64M`, `2G`, `1048576`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a byte count (e.g. 512M, 2G)"))?;
    let scale: usize = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        other => return Err(format!("unknown unit `{other}` in `{text}` (K, M or G)")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too large"))
}
