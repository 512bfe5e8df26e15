// The playground's logic. State worth checking from a test is on window.moeVoice.
'use strict';

const RATE = 24000;  // pcm16 of the realtime API
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const voice = window.moeVoice = {
  state: 'idle', transcripts: [], replies: [], partial: '',
  audioChunksReceived: 0, audioChunksPlayed: 0, capturedRms: 0, errors: [], events: [],
};
let modelId = params.get('model') || '';

function authHeaders() {
  const key = $('apikey').value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: authHeaders() });
    const j = await r.json();
    if (!modelId && j.data && j.data.length) modelId = j.data[0].id;
  } catch (e) { /* shown below */ }
  $('model').textContent = `model: ${modelId || '?'}`;
}

// --- chat ---

const history = [];
function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  $('messages').appendChild(div);
  $('messages').scrollTop = $('messages').scrollHeight;
  return div;
}

$('chat-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('chat-input').value.trim();
  if (!text) return;
  $('chat-input').value = '';
  addMessage('user', text);
  history.push({ role: 'user', content: text });
  const out = addMessage('assistant', '');
  let reply = '';
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: JSON.stringify({ model: modelId, messages: history, stream: true, max_tokens: 128 }),
    });
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 2);
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const j = JSON.parse(line.slice(6));
        if (j.error) throw new Error(j.error.message);
        reply += j.choices[0].delta.content || '';
        out.textContent = reply;
      }
    }
    history.push({ role: 'assistant', content: reply });
  } catch (e) {
    out.textContent = `error: ${e.message}`;
  }
});

// --- voice ---

let ws = null, ctx = null, stream = null, node = null;
let playAt = 0;
const playing = new Set();

function setState(s) {
  voice.state = s;
  $('voice-state').textContent = s;
}

function toBase64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

function send(event) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(event));
}

function onCapture(block) {
  let sum = 0;
  const pcm = new Int16Array(block.length);
  for (let i = 0; i < block.length; i++) {
    const v = Math.max(-1, Math.min(1, block[i]));
    pcm[i] = v < 0 ? v * 0x8000 : v * 0x7fff;
    sum += v * v;
  }
  const rms = Math.sqrt(sum / block.length);
  voice.capturedRms = Math.max(voice.capturedRms, rms);
  $('level-bar').style.width = `${Math.min(100, rms * 400)}%`;
  send({ type: 'input_audio_buffer.append', audio: toBase64(new Uint8Array(pcm.buffer)) });
}

function stopPlayback() {
  for (const src of playing) {
    try { src.stop(); } catch (e) { /* already ended */ }
  }
  playing.clear();
  playAt = 0;
}

function play(b64) {
  const bin = atob(b64);
  const n = bin.length >> 1;
  const buffer = ctx.createBuffer(1, n, RATE);
  const ch = buffer.getChannelData(0);
  for (let i = 0; i < n; i++) {
    let v = bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8);
    if (v >= 0x8000) v -= 0x10000;
    ch[i] = v / 0x8000;
  }
  const src = ctx.createBufferSource();
  src.buffer = buffer;
  src.connect(ctx.destination);
  playAt = Math.max(playAt, ctx.currentTime + 0.02);
  src.start(playAt);
  playAt += buffer.duration;
  playing.add(src);
  src.onended = () => { playing.delete(src); voice.audioChunksPlayed++; };
}

function reply(id) {
  let li = document.querySelector(`#replies li[data-id="${id}"]`);
  if (!li) {
    li = document.createElement('li');
    li.dataset.id = id;
    $('replies').appendChild(li);
  }
  return li;
}

function onEvent(e) {
  voice.events.push(e.type);
  switch (e.type) {
    case 'input_audio_buffer.speech_started':
      setState('listening');
      stopPlayback();  // barge-in: the server cancels the reply too
      break;
    case 'input_audio_buffer.speech_stopped':
      setState('thinking');
      break;
    case 'conversation.item.input_audio_transcription.delta':
      voice.partial += e.delta;
      $('live-transcript').textContent = voice.partial;
      break;
    case 'conversation.item.input_audio_transcription.completed': {
      voice.partial = '';
      $('live-transcript').textContent = '';
      voice.transcripts.push(e.transcript);
      const li = document.createElement('li');
      li.textContent = e.transcript;
      $('transcripts').appendChild(li);
      break;
    }
    case 'response.output_audio_transcript.delta':
    case 'response.output_text.delta':
      reply(e.item_id).textContent += e.delta;
      setState('speaking');
      break;
    case 'response.output_audio.delta':
      voice.audioChunksReceived++;
      play(e.delta);
      break;
    case 'response.done':
      voice.replies.push({ status: e.response.status, text: reply(e.response.output[0]?.id ?? '').textContent });
      if (voice.state !== 'listening') setState('ready');
      break;
    case 'error':
      voice.errors.push(e.error.message);
      console.warn('realtime error:', e.error.message);
      break;
    default:
      break;
  }
}

async function startVoice() {
  setState('starting');
  ctx = new AudioContext({ sampleRate: RATE });
  await ctx.resume();
  // ?raw=1: the microphone's samples as they are (no echo cancellation, noise suppression or
  // gain control), e.g. for a recorded test file.
  const raw = params.get('raw') === '1';
  stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: !raw, noiseSuppression: !raw, autoGainControl: !raw },
  });
  await ctx.audioWorklet.addModule('/playground/capture-worklet.js');
  const key = $('apikey').value.trim();
  const protocols = ['realtime'];
  if (key) protocols.push(`openai-insecure-api-key.${key}`);
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  ws = new WebSocket(`${scheme}://${location.host}/v1/realtime?model=${encodeURIComponent(modelId)}`, protocols);
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = () => { if (voice.state !== 'idle') setState('closed'); };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  send({
    type: 'session.update',
    session: {
      type: 'realtime',
      output_modalities: ['audio'],
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: RATE },
          transcription: { model: 'pocketsphinx' },
          turn_detection: { type: 'server_vad', silence_duration_ms: 300 },
        },
        output: { format: { type: 'audio/pcm', rate: RATE }, voice: 'alloy' },
      },
      max_output_tokens: Number(params.get('max_tokens') || 64),
    },
  });
  node = new AudioWorkletNode(ctx, 'capture');
  node.port.onmessage = (m) => onCapture(m.data);
  ctx.createMediaStreamSource(stream).connect(node);
  setState('ready');
  $('voice-toggle').textContent = 'Stop voice';
}

function stopVoice() {
  stopPlayback();
  if (ws) ws.close();
  if (stream) stream.getTracks().forEach((t) => t.stop());
  if (ctx) ctx.close();
  ws = ctx = stream = node = null;
  setState('idle');
  $('voice-toggle').textContent = 'Start voice';
}

$('voice-toggle').addEventListener('click', () => {
  if (ws) {
    stopVoice();
  } else {
    startVoice().catch((e) => { voice.errors.push(String(e)); setState(`error: ${e.message || e}`); });
  }
});

loadModel();
