/**
 * inferno: a GGUF language model in WebAssembly, in the browser (a Web Worker) or in Node.js,
 * behind the shape of the OpenAI client. No WebGPU needed; no network at run time except the
 * model URL you pass.
 *
 * ```js
 * import { createEngine } from 'inferno-llm';
 * const engine = await createEngine({ model: '/models/SmolLM2-135M-Instruct.Q4_1.gguf' });
 * const stream = await engine.chat.completions.create({
 *   messages: [{ role: 'user', content: 'Why is the sky blue?' }], stream: true,
 * });
 * for await (const chunk of stream) out.textContent += chunk.choices[0].delta.content ?? '';
 * ```
 * @packageDocumentation
 */

/** Progress of {@link createEngine}: the model's bytes arriving, then its tensors loading. */
export interface Progress {
  /** `download`: bytes fetched (or read from the cache); `load`: tensors repacked. */
  phase: 'download' | 'load';
  loaded: number;
  /** 0 when the server does not say the size. */
  total: number;
  /** The bytes came from the Cache API. */
  cached: boolean;
}

export interface EngineOptions {
  /**
   * The GGUF model: a URL (fetched once, then kept in the Cache API when `cache` is on), a
   * `File` or `Blob` (a file picker), an `ArrayBuffer` or `Uint8Array`, or in Node.js a path.
   */
  model: string | URL | File | Blob | ArrayBuffer | Uint8Array;
  /** Called during download and load. */
  onProgress?: (progress: Progress) => void;
  /**
   * Threads for the threads build (browser, cross-origin-isolated page only). Default: one per
   * core, up to 16 (`navigator.hardwareConcurrency`, which Firefox takes from every online CPU,
   * not the ones the browser may use); 1 picks a one-thread build. A worker whose build has not
   * started within 30 s is ended and a one-thread build starts in a new one (`stats().skipped`
   * says so).
   */
  threads?: number;
  /** Keep a URL's bytes in the Cache API and read them from there next time. Default true. */
  cache?: boolean;
  /**
   * Force a build: `threads`, `relaxed`, `simd128` or `reference`. Default: the fastest this
   * runtime runs (threads when cross-origin isolated, else relaxed, simd128, reference; simd128
   * in Node.js).
   */
  variant?: 'threads' | 'relaxed' | 'simd128' | 'reference';
  /** Run in a Web Worker (default in browsers) or on this thread (default in Node.js). */
  worker?: boolean;
  /** Refuse models larger than this many bytes. Default 1.5 GiB (what fits in wasm memory). */
  maxBytes?: number;
}

/** One message of a conversation. Only text content. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | string;
  content: string | Array<{ type: 'text'; text: string }>;
}

/** Prompt-lookup speculative decoding: the same output, faster when text repeats. */
export interface SpeculativeOptions {
  enabled?: boolean;
  /** Most drafted tokens per step. */
  draft_max?: number;
  ngram_min?: number;
  ngram_max?: number;
}

/** Sampling and stopping. Fields left out take core's defaults (the CLI's): see `engine.defaults`. */
export interface GenerationParams {
  /** Most tokens to generate. */
  max_tokens?: number;
  /** Alias of max_tokens (newer OpenAI clients). */
  max_completion_tokens?: number;
  /** 0 is greedy (argmax). */
  temperature?: number;
  top_p?: number;
  /** 0: no cut. */
  top_k?: number;
  min_p?: number;
  /** 1: no penalty. */
  repeat_penalty?: number;
  repeat_last_n?: number;
  /** Seed of the sampler's random stream: the same seed gives the same reply. */
  seed?: number;
  /** Strings that end the reply (not included in it). */
  stop?: string | string[];
  /** true/false, or the speculative decoder's settings. */
  speculative?: boolean | SpeculativeOptions;
  /** Only 1 is supported. */
  n?: 1;
  /** Stops the request: a stream throws an `AbortError` at its next chunk, a promise rejects. */
  signal?: AbortSignal;
}

export interface ChatCompletionRequest extends GenerationParams {
  messages: ChatMessage[];
  /** Ignored by the in-browser engine (it has one model); sent to a server. */
  model?: string;
  stream?: boolean;
}

export interface CompletionRequest extends GenerationParams {
  /** Raw text, no chat template (BOS is added if the model wants one). */
  prompt: string;
  model?: string;
  stream?: boolean;
}

/** `stop`: end of turn or a stop string; `length`: max_tokens or a full context; `abort`: stopped. */
export type FinishReason = 'stop' | 'length' | 'abort';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{ index: 0; message: { role: 'assistant'; content: string }; finish_reason: FinishReason; logprobs: null }>;
  usage: Usage;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  /** `delta.content` holds the next piece of text; the last chunk has `finish_reason` and `usage`. */
  choices: Array<{ index: 0; delta: { role?: 'assistant'; content?: string }; finish_reason: FinishReason | null; logprobs: null }>;
  usage?: Usage;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: 0; text: string; finish_reason: FinishReason | null; logprobs: null }>;
  usage?: Usage;
}

/** A streamed reply: iterate it with `for await`; `break` (or `controller.abort()`) stops generating. */
export interface Stream<T> extends AsyncIterable<T> {
  controller: AbortController;
}

/** What compose did to the cache. */
export interface ComposeResult {
  /** Tokens of the cache kept. */
  reused: number;
  /** Tokens run through the model now. */
  prefilled: number;
  ms: number;
}

/** The figures of the last request. */
export interface RequestStats {
  prompt_tokens: number;
  /** Prompt tokens whose KV cache was already there (the conversation so far, a composed draft). */
  reused: number;
  prefilled: number;
  completion_tokens: number;
  prefill_ms: number;
  decode_ms: number;
  /** core's stop reason: EndOfGeneration, StopString, MaxTokens, ContextFull, Cancelled. */
  stop: string | null;
  /** What speculation did; null when it was off. */
  speculative: { attempts: number; drafted: number; accepted: number; forwards: number; tokens: number } | null;
}

export interface EngineStats {
  /** The wasm build running. */
  variant: 'threads' | 'relaxed' | 'simd128' | 'reference';
  threads: number;
  /** The kernel backend inside it. */
  kernels: string | null;
  /** Faster builds that were tried first and could not start here, with the reason. */
  skipped: Array<{ variant: string; error: string }>;
  model: { name: string; bytes: number; config: Record<string, unknown> } | null;
  /** Tokens held in the KV cache. */
  cached_tokens: number;
  last: RequestStats | null;
}

export interface Engine {
  chat: {
    completions: {
      create(request: ChatCompletionRequest & { stream: true }): Promise<Stream<ChatCompletionChunk>>;
      create(request: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
      create(request: ChatCompletionRequest): Promise<ChatCompletion | Stream<ChatCompletionChunk>>;
    };
  };
  /** Raw text continuation, no chat template. */
  completions: {
    create(request: CompletionRequest & { stream: true }): Promise<Stream<Completion>>;
    create(request: CompletionRequest & { stream?: false }): Promise<Completion>;
    create(request: CompletionRequest): Promise<Completion | Stream<Completion>>;
  };
  /** Core's generation defaults: what a request gets for each field it leaves out. */
  readonly defaults: Required<Omit<GenerationParams, 'signal' | 'n' | 'max_completion_tokens' | 'speculative'>> & { speculative: SpeculativeOptions };
  /** Token ids of `text` (special tokens parsed, no BOS added). */
  tokenize(text: string): Promise<number[]>;
  detokenize(ids: ArrayLike<number>): Promise<string>;
  /**
   * Prefill while the user types: runs the conversation (by default the last request's messages
   * and its reply) plus `draft` as the next user message through the model, so sending it
   * costs only the tokens typed since. Call it again as the draft changes.
   */
  compose(draft: string, messages?: ChatMessage[]): Promise<ComposeResult>;
  stats(): Promise<EngineStats>;
  /** Frees the model and ends the worker; the engine cannot be used afterwards. */
  unload(): Promise<void>;
}

/**
 * Starts the engine (picks the wasm build, starts its worker) and loads the model. Rejects with
 * an `Error` saying what failed (download, not a GGUF file, truncated, too large, ...).
 */
export function createEngine(options: EngineOptions): Promise<Engine>;

export interface CachedModel {
  url: string;
  bytes: number;
}

/** Models kept in the Cache API by `cache: true` (empty in Node.js). */
export function listCachedModels(): Promise<CachedModel[]>;

/** Deletes one cached model by URL, or all of them without one. Resolves to whether anything was deleted. */
export function deleteCachedModel(url?: string): Promise<boolean>;

export interface ServerEngineOptions {
  /** The server's origin; default: the page's own. */
  baseURL?: string;
  /** The model name sent with each request. */
  model?: string;
  apiKey?: string;
  fetch?: typeof fetch;
}

/** The same `chat.completions.create` shape, answered by an OpenAI-compatible server (`inferno serve`). */
export interface ServerEngine {
  chat: {
    completions: {
      create(request: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
      create(request: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
      create(request: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
    };
  };
  completions: {
    create(request: CompletionRequest & { stream: true }): Promise<AsyncIterable<Completion>>;
    create(request: CompletionRequest & { stream?: false }): Promise<Completion>;
    create(request: CompletionRequest): Promise<Completion | AsyncIterable<Completion>>;
  };
  models: { list(): Promise<{ object: 'list'; data: Array<{ id: string; object: 'model' }> }> };
  /** Prefills the conversation and draft in the server's prefix cache (POST /v1/compose). */
  compose(draft: string, messages?: ChatMessage[]): Promise<ComposeResult>;
  stats(): Promise<{ server: string; last: { usage: Usage | null } | null }>;
  unload(): Promise<void>;
}

export function createServerEngine(options?: ServerEngineOptions): ServerEngine;
