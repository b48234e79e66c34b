// The page: UI only. Every computation happens in worker.js; this file sends it the messages of
// protocol.js and draws what comes back. URL parameters: ?model=URL (default model.gguf next to
// the page), ?autoload=0 (wait for a click), ?variant=reference|simd128|relaxed|threads (force a
// build), ?threads=N (threads of the threads build, which needs a cross-origin-isolated page),
// ?maxModelMB=N (a lower size limit, for tests of the too-large error), ?sw=0 (no service worker).
import { ToWorker, FromWorker, MAX_MODEL_BYTES } from './protocol.js';

const $ = (id) => document.getElementById(id);
const params = new URL(location.href).searchParams;
const modelUrl = new URL(params.get('model') || 'model.gguf', location.href).href;
const maxBytes = params.has('maxModelMB') ? Number(params.get('maxModelMB')) * 1048576 : MAX_MODEL_BYTES;
const DRAFT_DELAY_MS = 200;

let worker;
let loaded = false;      // a model is ready
let busy = false;        // loading or generating
let reply = null;        // the assistant message element being streamed
let draftTimer = 0;

function startWorker() {
  const forward = new URLSearchParams();
  for (const name of ['variant', 'threads']) if (params.has(name)) forward.set(name, params.get(name));
  worker = new Worker(`worker.js${forward.size ? `?${forward}` : ''}`, { type: 'module' });
  worker.onmessage = ({ data }) => on[data.type]?.(data);
  worker.onerror = (e) => showError(`the worker failed: ${e.message || e}`);
}

const send = (type, fields = {}) => worker.postMessage({ type, ...fields });

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
  $('download').disabled = value;
  $('file').disabled = value;
}

const mb = (n) => `${(n / 1048576).toFixed(1)} MB`;

// The sampler settings of the page: one input per option of core's GenerateOptions, with the
// input's id the option's name. Their values start as core's defaults (sent by the worker), the
// same ones the CLI shows in --help.
const OPTION_INPUTS = ['temperature', 'top_k', 'top_p', 'min_p', 'repeat_penalty', 'seed', 'max_tokens'];
let defaults = null;

function showDefaults(d) {
  defaults = d;
  for (const name of OPTION_INPUTS) if ($(name).value === '') $(name).value = d[name];
  if (!$('speculative').dataset.touched) $('speculative').checked = d.speculative.enabled;
}

function settings() {
  const options = {};
  for (const name of OPTION_INPUTS) {
    const v = Number($(name).value);
    // An empty or unreadable field takes core's default; the worker reports values core refuses.
    options[name] = $(name).value !== '' && Number.isFinite(v) ? v : defaults?.[name];
  }
  for (const name of ['top_k', 'seed', 'max_tokens']) options[name] = Math.max(0, Math.floor(options[name]));
  // Speculation changes speed only: the reply is the same either way.
  options.speculative = { ...defaults?.speculative, enabled: $('speculative').checked };
  return { options, system: $('system').value.trim() };
}

function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = `msg ${role}`;
  el.textContent = text;
  $('chat').append(el);
  $('chat').scrollTop = $('chat').scrollHeight;
  return el;
}

function loadFromUrl() {
  hideError();
  setBusy(true);
  $('model-status').textContent = `downloading ${modelUrl.split('/').pop()}…`;
  send(ToWorker.LOAD_URL, { url: modelUrl, maxBytes });
}

// Worker -> page, one handler per message of protocol.js.
const on = {
  [FromWorker.WASM]({ variant, threads, defaults: d }) {
    showDefaults(d);
    $('model-status').textContent = `wasm build: ${variant}${threads > 1 ? `, ${threads} threads` : ''}`;
  },
  [FromWorker.DOWNLOAD]({ loaded: got, total, cached }) {
    $('download-progress').value = total ? got / total : 0;
    $('download-text').textContent = `${mb(got)}${total ? ` of ${mb(total)}` : ''}${cached ? ' (from the browser cache)' : ''}`;
  },
  [FromWorker.LOAD]({ done, total }) {
    $('load-progress').value = total ? done / total : 0;
    $('load-text').textContent = `${done} of ${total} tensors`;
  },
  [FromWorker.LOADED]({ kernels, variant, threads, config, ms, bytes, name }) {
    loaded = true;
    setBusy(false);
    $('load-progress').value = 1;
    $('load-text').textContent = `ready in ${(ms / 1000).toFixed(1)} s`;
    const layers = config.num_hidden_layers ?? '?';
    $('model-status').textContent = `${name} (${mb(bytes)}, ${layers} layers) · wasm ${variant}${threads > 1 ? ` · ${threads} threads` : ''} · kernels ${kernels}`;
    document.body.dataset.ready = '1';
    $('input').focus();
  },
  [FromWorker.DRAFTED]({ reused, prefilled, ms }) {
    if (!busy) $('stats').textContent = `draft: ${prefilled} tokens prefilled ahead (${reused} kept) in ${ms.toFixed(0)} ms`;
  },
  [FromWorker.TURN_START]({ promptTokens, reused, prefilled, droppedTurns, ms }) {
    reply.dataset.prefill = `${prefilled}`;
    if (droppedTurns > 0) {
      // Said once, where it happened: the model no longer sees those turns.
      const note = document.createElement('div');
      note.className = 'msg notice';
      note.textContent = `The conversation outgrew the model's context: the ${droppedTurns} oldest ` +
        `turn${droppedTurns === 1 ? ' is' : 's are'} no longer seen by the model. New chat clears everything.`;
      reply.before(note);
    }
    $('stats').textContent = `prefill ${prefilled} tokens (${reused} of ${promptTokens} reused) in ${ms.toFixed(0)} ms`;
  },
  [FromWorker.TOKEN]({ text }) {
    reply.textContent += text;
    $('chat').scrollTop = $('chat').scrollHeight;
  },
  [FromWorker.TURN_END]({ text, stop, prefilled, prefillMs, decoded, decodeMs, speculative }) {
    reply.textContent = text;
    reply.dataset.done = '1';
    reply.dataset.stop = stop;
    const rate = (n, ms) => (ms > 0 ? (n / ms) * 1000 : 0).toFixed(1);
    const meta = document.createElement('span');
    meta.className = 'meta';
    meta.textContent = `prefill ${prefilled} tok at ${rate(prefilled, prefillMs)} tok/s · ` +
      `decode ${decoded} tok at ${rate(decoded, decodeMs)} tok/s · ${stop}` +
      (speculative ? ` · speculative: ${speculative.accepted}/${speculative.drafted} accepted` +
        ` (${speculative.drafted ? Math.round((100 * speculative.accepted) / speculative.drafted) : 0}%),` +
        ` ${(speculative.tokens / Math.max(1, speculative.forwards)).toFixed(2)} tok/forward` : '');
    $('stats').textContent = meta.textContent;
    reply.after(meta);
    reply = null;
    setBusy(false);
    $('input').focus();
  },
  [FromWorker.ERROR]({ message, during, fatal }) {
    showError(during === 'load' ? `Could not load the model: ${message}` : `Error (${during}): ${message}`);
    if (reply) {
      reply.dataset.done = '1';
      reply = null;
    }
    if (fatal) {
      // The wasm instance trapped: start over with a fresh worker (and the default model).
      worker.terminate();
      loaded = false;
      startWorker();
      if (params.get('autoload') !== '0') loadFromUrl();
      return;
    }
    setBusy(false);
    if (!loaded && during === 'load') $('model-status').textContent = 'no model loaded';
  },
};

function submit() {
  const text = $('input').value;
  if (!loaded || busy || !text.trim()) return;
  clearTimeout(draftTimer);
  hideError();
  addMessage('user', text);
  reply = addMessage('assistant', '');
  $('input').value = '';
  setBusy(true);
  send(ToWorker.SETTINGS, settings());
  send(ToWorker.SEND, { text });
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
// Compose-while-typing: once typing pauses, the worker prefills the draft.
$('input').addEventListener('input', () => {
  clearTimeout(draftTimer);
  draftTimer = setTimeout(() => {
    if (loaded && !busy && $('input').value.trim()) {
      send(ToWorker.SETTINGS, settings());
      send(ToWorker.DRAFT, { text: $('input').value });
    }
  }, DRAFT_DELAY_MS);
});
$('stop').addEventListener('click', () => send(ToWorker.STOP));
$('reset').addEventListener('click', () => {
  send(ToWorker.RESET);
  $('chat').replaceChildren();
  $('stats').textContent = '';
});
$('speculative').addEventListener('change', () => {
  $('speculative').dataset.touched = '1';
});
$('system').addEventListener('change', () => {
  $('chat').replaceChildren();
  if (loaded && !busy) send(ToWorker.SETTINGS, settings());
});
$('download').addEventListener('click', loadFromUrl);
$('file').addEventListener('change', () => {
  const file = $('file').files[0];
  if (!file) return;
  hideError();
  setBusy(true);
  $('model-status').textContent = `reading ${file.name}…`;
  send(ToWorker.LOAD_FILE, { file, maxBytes });
  $('file').value = '';
});
$('error-close').addEventListener('click', hideError);

// The service worker keeps the page's own files, so a reload works offline (sw.js).
if ('serviceWorker' in navigator && params.get('sw') !== '0') {
  navigator.serviceWorker.register('sw.js').catch((e) => console.warn('no offline copy of the page:', e));
}
startWorker();
setBusy(false);
if (params.get('autoload') !== '0') loadFromUrl();
