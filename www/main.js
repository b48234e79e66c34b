// The page: UI only, a consumer of the npm package (npm/, served at /inferno/ and imported as
// 'inferno-llm' through index.html's import map). The model runs "in this tab" (createEngine:
// the package's Web Worker) or on "this server" (createServerEngine: the page's own origin,
// an OpenAI-compatible `inferno serve`); both have the same `chat.completions.create`.
// URL parameters: ?model=URL (default model.gguf next to the page), ?autoload=0 (wait for a
// click), ?variant=reference|simd128|relaxed|threads (force a build), ?threads=N (threads of the
// threads build, which needs a cross-origin-isolated page), ?maxModelMB=N (a lower size limit,
// for tests of the too-large error), ?sw=0 (no service worker), ?engine=server.
import { createEngine, createServerEngine } from 'inferno-llm';

const $ = (id) => document.getElementById(id);
const params = new URL(location.href).searchParams;
const modelUrl = new URL(params.get('model') || 'model.gguf', location.href).href;
const maxBytes = params.has('maxModelMB') ? Number(params.get('maxModelMB')) * 1048576 : undefined;
const DRAFT_DELAY_MS = 200;

let engine = null;       // the engine in use (tab or server)
let mode = params.get('engine') === 'server' ? 'server' : 'tab';
let loaded = false;      // an engine is ready
let busy = false;        // loading or generating
let reply = null;        // the assistant message element being streamed
let controller = null;   // aborts the reply being streamed
let history = [];        // the conversation: user and assistant messages
let draftTimer = 0;

function showError(message) {
  $('error-text').textContent = message;
  $('error').hidden = false;
}

function hideError() {
  $('error').hidden = true;
}

function setBusy(value) {
  busy = value;
  const generating = value && reply !== null;
  $('input').disabled = !loaded;
  $('send').disabled = !loaded || value;
  $('stop').disabled = !generating;
  $('reset').disabled = !loaded || value;
  $('download').disabled = value || mode !== 'tab';
  $('file').disabled = value || mode !== 'tab';
  $('engine-mode').disabled = value;
}

const mb = (n) => `${(n / 1048576).toFixed(1)} MB`;

// The sampler settings of the page: one input per request field, with the input's id the
// field's name. Their values start as the engine's defaults (core's, the CLI's too).
const OPTION_INPUTS = ['temperature', 'top_k', 'top_p', 'min_p', 'repeat_penalty', 'seed', 'max_tokens'];
let defaults = null;

function showDefaults(d) {
  defaults = d;
  for (const name of OPTION_INPUTS) if ($(name).value === '') $(name).value = d[name];
  if (!$('speculative').dataset.touched) $('speculative').checked = d.speculative.enabled;
}

function requestOptions() {
  const options = {};
  for (const name of OPTION_INPUTS) {
    const v = Number($(name).value);
    // An empty or unreadable field takes the default; the engine reports values it refuses.
    if ($(name).value !== '' && Number.isFinite(v)) options[name] = v;
  }
  for (const name of ['top_k', 'seed', 'max_tokens']) if (name in options) options[name] = Math.max(0, Math.floor(options[name]));
  // Speculation changes speed only: the reply is the same either way (the tab's engine only).
  if (mode === 'tab') options.speculative = { ...defaults?.speculative, enabled: $('speculative').checked };
  return options;
}

function conversation() {
  const system = $('system').value.trim();
  return [...(system ? [{ role: 'system', content: system }] : []), ...history];
}

function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = `msg ${role}`;
  el.textContent = text;
  $('chat').append(el);
  $('chat').scrollTop = $('chat').scrollHeight;
  return el;
}

function onProgress({ phase, loaded: got, total, cached }) {
  if (phase === 'download') {
    $('download-progress').value = total ? got / total : 0;
    $('download-text').textContent = `${mb(got)}${total ? ` of ${mb(total)}` : ''}${cached ? ' (from the browser cache)' : ''}`;
  } else {
    $('load-progress').value = total ? got / total : 0;
    $('load-text').textContent = `${got} of ${total} tensors`;
  }
}

// Loads a model into the tab's engine; a model that fails to load leaves the one before in use.
async function loadModel(model, label) {
  hideError();
  setBusy(true);
  $('model-status').textContent = label;
  const t0 = performance.now();
  try {
    const options = { model, onProgress, maxBytes };
    if (params.has('variant')) options.variant = params.get('variant');
    if (params.has('threads')) options.threads = Number(params.get('threads'));
    const next = await createEngine(options);
    if (mode !== 'tab') return next.unload();
    await engine?.unload().catch(() => {});
    engine = next;
    const s = await engine.stats();
    showDefaults(engine.defaults);
    loaded = true;
    $('load-progress').value = 1;
    $('load-text').textContent = `ready in ${((performance.now() - t0) / 1000).toFixed(1)} s`;
    const layers = s.model.config.num_hidden_layers ?? '?';
    $('model-status').textContent = `${s.model.name} (${mb(s.model.bytes)}, ${layers} layers) · wasm ${s.variant}` +
      `${s.threads > 1 ? ` · ${s.threads} threads` : ''} · kernels ${s.kernels}`;
    document.body.dataset.ready = '1';
    $('input').focus();
  } catch (e) {
    showError(`Could not load the model: ${e.message.replace(/^cannot load the model: /, '')}`);
    if (!loaded) $('model-status').textContent = 'no model loaded';
  } finally {
    setBusy(false);
  }
}

const loadFromUrl = () => loadModel(modelUrl, `downloading ${modelUrl.split('/').pop()}…`);

async function useServer() {
  hideError();
  await engine?.unload().catch(() => {});
  engine = createServerEngine();
  loaded = false;
  setBusy(true);
  try {
    const models = await engine.models.list();
    loaded = true;
    $('model-status').textContent = `this server (${location.origin}): ${models.data.map((m) => m.id).join(', ')}`;
    document.body.dataset.ready = '1';
  } catch (e) {
    showError(`No OpenAI-compatible server here: ${e.message}`);
    $('model-status').textContent = 'no server';
  } finally {
    setBusy(false);
  }
}

async function submit() {
  const text = $('input').value;
  if (!loaded || busy || !text.trim()) return;
  clearTimeout(draftTimer);
  hideError();
  addMessage('user', text);
  reply = addMessage('assistant', '');
  $('input').value = '';
  setBusy(true);
  controller = new AbortController();
  let stop = 'Stopped';
  let droppedTurns = 0;
  for (;;) {
    const messages = [...conversation(), { role: 'user', content: text }];
    try {
      const stream = await engine.chat.completions.create({ ...requestOptions(), messages, stream: true, signal: controller.signal });
      for await (const chunk of stream) {
        const piece = chunk.choices[0]?.delta?.content;
        if (piece) {
          reply.textContent += piece;
          $('chat').scrollTop = $('chat').scrollHeight;
        }
        if (chunk.choices[0]?.finish_reason) stop = chunk.choices[0].finish_reason;
      }
    } catch (e) {
      // The conversation outgrew the context before the reply began: drop the oldest turn
      // (a user message and its reply) and try again.
      if (/context overflow/.test(e.message) && !reply.textContent && history.length >= 2) {
        history.splice(0, 2);
        droppedTurns++;
        continue;
      }
      if (e.name !== 'AbortError') showError(`Error (turn): ${e.message}`);
    }
    break;
  }
  if (droppedTurns > 0) {
    // Said once, where it happened: the model no longer sees those turns.
    const note = document.createElement('div');
    note.className = 'msg notice';
    note.textContent = `The conversation outgrew the model's context: the ${droppedTurns} oldest ` +
      `turn${droppedTurns === 1 ? ' is' : 's are'} no longer seen by the model. New chat clears everything.`;
    reply.before(note);
  }
  history.push({ role: 'user', content: text }, { role: 'assistant', content: reply.textContent });
  await showTurnStats(stop);
  reply.dataset.done = '1';
  reply = null;
  controller = null;
  setBusy(false);
  $('input').focus();
}

// The figures under a reply: prefill and decode speed, and what speculation did.
async function showTurnStats(finish) {
  const s = await engine.stats().catch(() => null);
  const last = s?.last;
  if (!last || mode !== 'tab') return;
  const stop = controller.signal.aborted ? 'Stopped' : (last.stop || finish);
  reply.dataset.prefill = `${last.prefilled}`;
  reply.dataset.stop = stop;
  const rate = (n, ms) => (ms > 0 ? (n / ms) * 1000 : 0).toFixed(1);
  const sp = last.speculative;
  const meta = document.createElement('span');
  meta.className = 'meta';
  meta.textContent = `prefill ${last.prefilled} tok at ${rate(last.prefilled, last.prefill_ms)} tok/s · ` +
    `decode ${last.completion_tokens} tok at ${rate(last.completion_tokens, last.decode_ms)} tok/s · ${stop}` +
    (sp ? ` · speculative: ${sp.accepted}/${sp.drafted} accepted` +
      ` (${sp.drafted ? Math.round((100 * sp.accepted) / sp.drafted) : 0}%),` +
      ` ${(sp.tokens / Math.max(1, sp.forwards)).toFixed(2)} tok/forward` : '');
  $('stats').textContent = meta.textContent;
  reply.after(meta);
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  submit();
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    submit();
  }
});
// Compose-while-typing: once typing pauses, the engine prefills the draft.
$('input').addEventListener('input', () => {
  clearTimeout(draftTimer);
  draftTimer = setTimeout(async () => {
    if (!loaded || busy || !$('input').value.trim()) return;
    try {
      const d = await engine.compose($('input').value, conversation());
      if (!busy) $('stats').textContent = `draft: ${d.prefilled} tokens prefilled ahead (${d.reused} kept) in ${d.ms.toFixed(0)} ms`;
    } catch (e) {
      console.warn('compose:', e);
    }
  }, DRAFT_DELAY_MS);
});
$('stop').addEventListener('click', () => controller?.abort());
$('reset').addEventListener('click', () => {
  history = [];
  $('chat').replaceChildren();
  $('stats').textContent = '';
});
$('speculative').addEventListener('change', () => {
  $('speculative').dataset.touched = '1';
});
$('system').addEventListener('change', () => {
  history = [];
  $('chat').replaceChildren();
});
$('download').addEventListener('click', loadFromUrl);
$('file').addEventListener('change', () => {
  const file = $('file').files[0];
  if (!file) return;
  loadModel(file, `reading ${file.name}…`);
  $('file').value = '';
});
$('engine-mode').value = mode;
$('engine-mode').addEventListener('change', () => {
  mode = $('engine-mode').value;
  history = [];
  $('chat').replaceChildren();
  loaded = false;
  if (mode === 'server') useServer();
  else loadFromUrl();
});
$('error-close').addEventListener('click', hideError);

// The service worker keeps the page's own files, so a reload works offline (sw.js).
if ('serviceWorker' in navigator && params.get('sw') !== '0') {
  navigator.serviceWorker.register('sw.js').catch((e) => console.warn('no offline copy of the page:', e));
}
setBusy(false);
if (mode === 'server') useServer();
else if (params.get('autoload') !== '0') loadFromUrl();
else $('model-status').textContent = 'no model loaded';
