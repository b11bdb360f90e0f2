// The demo, built on onejob's TypeScript client (clients/typescript, served
// from the binary): one idempotency key per intent, made by the client once
// and sent with every click and retry of that intent. The buttons are never
// disabled to stop a double click: the key makes the second click the same
// request. The client calls the demo's routes with the session's cookie and
// CSRF token instead of an API key.
//
// The answer is read from the job's output: token by token when the task
// streams. The intent (its key, in the client's sessionStorage key store,
// and its text) is kept by the tab: a reload mid-answer sends the same
// request again, which finds the same job, and reads its output from the
// start, so the text so far comes back, then the rest.
import { OnejobClient, OnejobError, SessionStorageKeyStore } from '/ui/static/onejob-client.js';

const $ = (id) => document.getElementById(id);
const demo = $('demo');
if (demo) run(demo);

function run(demo) {
  const slow = demo.dataset.slow;
  const fast = demo.dataset.fast;
  const client = new OnejobClient({
    baseUrl: '/ui/api',
    keyStore: new SessionStorageKeyStore(),
    fetch: (url, init) => fetch(url, {
      ...init,
      credentials: 'same-origin',
      headers: { ...init.headers, 'X-CSRF-Token': window.OneJob.csrf() },
    }),
  });
  demo.dataset.client = 'onejob-client';

  let intent;         // the Generate intent
  let intentKey;      // its key
  let fallbackKey;    // the fallback intent's key, made with the job
  let job = null;     // the job the intent made
  let follower = null;
  let stallTimer = null;
  let stallSince = null; // when this page first saw attempt #1 running
  let reading = null;    // the AbortController of the answer being read
  const kept = 'onejob:demo:intent'; // the tab's intent: {intent, text, sent}

  function status(text, kind) {
    const line = $('status');
    line.textContent = text;
    line.className = 'status' + (kind ? ' ' + kind : '');
  }

  function log(text) {
    let list = $('requests');
    if (!list) {
      list = document.createElement('ol');
      list.id = 'requests';
      list.className = 'requests';
      $('status').after(list);
    }
    const item = document.createElement('li');
    item.textContent = text;
    list.append(item);
  }

  function showKeys() {
    $('intent-key').textContent = intentKey;
    $('fallback-key').textContent = fallbackKey || '—';
  }

  // The answer, from the job's output: pieces appended as they come, the
  // text cleared at a restart (another attempt's answer follows), then the
  // result (shown whole when nothing was streamed) or the error.
  async function readAnswer(id) {
    if (reading) reading.abort();
    const controller = new AbortController();
    reading = controller;
    const answer = $('answer');
    answer.textContent = '';
    answer.dataset.job = id;
    answer.dataset.state = 'reading';
    try {
      for await (const event of client.stream(id, { signal: controller.signal })) {
        if (event.kind === 'text') {
          answer.textContent += event.text;
          answer.dataset.state = 'streaming';
        } else if (event.kind === 'partial') {
          // The text already shows the answer so far.
        } else if (event.kind === 'restart') {
          answer.textContent = '';
          answer.dataset.restarts = String(Number(answer.dataset.restarts || 0) + 1);
        } else if (event.kind === 'waiting') {
          // The job waits for someone: say so, and keep reading (a
          // fallback's answer comes on this same stream).
          answer.dataset.state = 'waiting';
          status('The job ' + event.awaiting.state + ': ' + event.awaiting.next + '.', 'error');
        } else if (event.kind === 'result') {
          if (!answer.textContent) answer.textContent = shown(event.result);
          answer.dataset.state = 'result';
        } else {
          answer.textContent = 'No answer: the job is ' + event.state + '.';
          answer.dataset.state = 'error';
        }
      }
    } catch (error) {
      if (reading === controller) answer.dataset.state = 'unread';
    }
  }

  // A text task's result is its prose; any other is shown as JSON.
  function shown(result) {
    return typeof result === 'string' ? result : JSON.stringify(result);
  }

  function keep(sent) {
    sessionStorage.setItem(kept, JSON.stringify({ intent, text: $('text').value, sent }));
  }

  async function startIntent(restored) {
    intent = restored ? restored.intent : crypto.randomUUID();
    intentKey = await client.keyFor('create:' + intent);
    if (restored) $('text').value = restored.text;
    else keep(false);
    fallbackKey = null;
    job = null;
    if (reading) reading.abort();
    reading = null;
    const answer = $('answer');
    answer.textContent = '';
    delete answer.dataset.state;
    delete answer.dataset.job;
    delete answer.dataset.restarts;
    if (follower) follower.stop();
    clearInterval(stallTimer);
    stallSince = null;
    const box = $('timeline-box');
    box.dataset.job = '';
    delete box.dataset.settled;
    box.innerHTML = '';
    const list = $('requests');
    if (list) list.remove();
    $('fallback').disabled = true;
    status('Nothing sent yet.');
    showKeys();
  }

  function problem(error) {
    if (!(error instanceof OnejobError)) return String(error);
    const title = (error.problem && error.problem.title) || (error.status ? 'HTTP ' + error.status : 'No answer');
    return title + (error.detail ? ': ' + error.detail : '');
  }

  function tries(count) {
    return count > 1 ? ' after ' + count + ' tries' : '';
  }

  // What the timeline says, in words, and whether the fallback may be asked for.
  function onProgress(progress) {
    if (!progress) return;
    const state = progress.dataset.state;
    const attempts = (progress.dataset.attemptStates || '').split(' ').filter(Boolean).map((a) => {
      const [number, provider, attemptState] = a.split(':');
      return { number: Number(number), provider, state: attemptState };
    });
    const first = attempts[0];
    const finished = state === 'succeeded' || state === 'canceled';
    $('fallback').disabled = finished || !first || first.state === 'pending';
    clearInterval(stallTimer);
    if (finished) {
      const winner = attempts.find((a) => a.number === Number(progress.dataset.winner));
      const named = (wanted) => attempts.filter((a) => a.state === wanted).map((a) => '#' + a.number + ' on ' + a.provider);
      const [losers, canceled, running] = [named('superseded'), named('canceled'), named('running')];
      let text = 'Done: attempt #' + winner.number + ' on ' + winner.provider + ' won; its answer is the job\'s result.';
      if (canceled.length) text += ' Canceled, its call stopped at the provider (or never sent): ' + canceled.join(', ') + '.';
      if (losers.length) text += ' Superseded, kept for audit only: ' + losers.join(', ') + '.';
      if (running.length) text += ' Still running: ' + running.join(', ') + ' (its call is being canceled, or its answer will lose).';
      status(text, 'done');
    } else if (first && first.state === 'running' && attempts.length === 1) {
      if (!stallSince) stallSince = Date.now();
      const tick = () => status(slow + ' has been working for ' + ((Date.now() - stallSince) / 1000).toFixed(1) + ' s… Use the fallback, or wait.', 'stall');
      tick();
      stallTimer = setInterval(tick, 100);
    } else if (first && first.state === 'pending') {
      status('Queued: a worker is about to send attempt #1 to ' + slow + '.');
    } else {
      status('Racing: ' + attempts.map((a) => '#' + a.number + ' ' + a.provider + ' ' + a.state).join(', ') + '.');
    }
  }

  // Follows the job from its event stream, polling when the stream fails
  // (see OneJob.followTimeline).
  function follow(id) {
    const box = $('timeline-box');
    if (box.dataset.job === id) return;
    box.dataset.job = id;
    delete box.dataset.settled;
    follower = window.OneJob.followTimeline(box, onProgress);
  }

  async function generate() {
    const key = intentKey;
    const mine = intent;
    keep(true);
    try {
      // Sent as often as it takes, always with the intent's key.
      const created = await client.createJob({ task: demo.dataset.task, input: { message: $('text').value }, provider: slow }, { intent: mine });
      if (mine !== intent) return; // a new intent was started meanwhile
      job = created.job;
      if (!fallbackKey) fallbackKey = await client.keyFor('attempt:' + job.id + ':' + fast);
      showKeys();
      log('POST /jobs, key ' + key + ' → ' + created.status + tries(created.tries) + (created.replayed ? ' replayed: the same job ' : ' created job ') + job.id);
      follow(job.id);
      const answer = $('answer');
      if (answer.dataset.job !== job.id || answer.dataset.state === 'unread') readAnswer(job.id);
    } catch (error) {
      log('POST /jobs, key ' + key + ' → ' + (error.status || 'no answer') + ' ' + problem(error));
      status(problem(error) + '. Click Generate again: it sends the same key, so it cannot make a second job.', 'error');
    }
  }

  $('generate').addEventListener('click', generate);

  $('fallback').addEventListener('click', async () => {
    if (!job || !fallbackKey) return;
    const key = fallbackKey;
    try {
      // A double click is one intent: the client sends the same key.
      const answer = await client.fallback(job.id, fast);
      if (answer.kind === 'added') {
        log('POST /jobs/…/attempts, key ' + key + ' → ' + answer.status + (answer.replayed ? ' replayed: the same attempt #' : ' added attempt #') + answer.attempt.number + ' on ' + answer.attempt.provider);
      } else {
        const wait = answer.retryAfter ? ' (ask again in ' + answer.retryAfter + ' s)' : '';
        log('POST /jobs/…/attempts, key ' + key + ' → 409 ' + answer.kind + wait);
        status(answer.problem.detail || answer.kind, 'error');
      }
    } catch (error) {
      log('POST /jobs/…/attempts, key ' + key + ' → ' + (error.status || 'no answer') + ' ' + problem(error));
      status(problem(error), 'error');
    }
  });

  if ($('image-demo')) drawing(client, $('image-demo').dataset.task);

  $('again').addEventListener('click', () => startIntent(null));
  // A reload carries on with the tab's intent: sent already, it is sent
  // again with its key, and finds its job.
  let restored = null;
  try {
    restored = JSON.parse(sessionStorage.getItem(kept));
  } catch (e) { /* nothing kept */ }
  startIntent(restored && restored.intent ? restored : null).then(() => {
    if (restored && restored.sent) generate();
  });
}

// The picture: one `image` job per prompt intent, its key made once by the
// client and kept by the tab (a reload sends the same request again and
// finds the same job); the picture is the result's file, which onejob
// kept, read through the demo's route for the session's owner.
function drawing(client, task) {
  const kept = 'onejob:demo:image'; // the tab's picture intent: {intent, prompt, sent}
  let intent;
  let sends = 0;

  function status(text, kind) {
    const line = $('image-status');
    line.textContent = text;
    line.className = 'status' + (kind ? ' ' + kind : '');
  }

  async function start(restored) {
    intent = restored ? restored.intent : crypto.randomUUID();
    if (restored) $('prompt').value = restored.prompt;
    $('image-key').textContent = await client.keyFor('create:' + intent);
    $('picture').innerHTML = '';
    delete $('picture').dataset.job;
    sends = 0;
    status('Nothing drawn yet.');
  }

  async function draw() {
    const mine = intent;
    sessionStorage.setItem(kept, JSON.stringify({ intent, prompt: $('prompt').value, sent: true }));
    sends += 1;
    try {
      const created = await client.createJob({ task, input: { prompt: $('prompt').value } }, { intent: mine });
      if (mine !== intent) return;
      const id = created.job.id;
      const picture = $('picture');
      status((created.replayed ? 'The same job ' : 'Job ') + id + (sends > 1 ? ', after ' + sends + ' clicks' : '') + ': drawing…');
      if (picture.dataset.job === id) return; // already followed
      picture.dataset.job = id;
      for await (const event of client.stream(id)) {
        if (mine !== intent) return;
        if (event.kind === 'result') {
          const file = event.result;
          const img = document.createElement('img');
          img.src = '/ui/api' + file.url;
          img.alt = $('prompt').value;
          img.dataset.sha256 = file.sha256;
          picture.replaceChildren(img);
          status('Drawn once: job ' + id + ', ' + file.size + ' bytes of ' + file.content_type + ', kept by onejob.', 'done');
        } else if (event.kind === 'error') {
          status('No picture: the job is ' + event.state + '.', 'error');
        }
      }
    } catch (error) {
      status(String(error.detail || error) + '. Click Draw again: it sends the same key.', 'error');
    }
  }

  $('draw').addEventListener('click', draw);
  // Another prompt is another intent, with a key of its own.
  $('prompt').addEventListener('input', () => {
    if (sends > 0) start(null);
  });
  $('image-again').addEventListener('click', () => {
    sessionStorage.removeItem(kept);
    start(null);
  });
  let restored = null;
  try {
    restored = JSON.parse(sessionStorage.getItem(kept));
  } catch (e) { /* nothing kept */ }
  start(restored && restored.intent ? restored : null).then(() => {
    if (restored && restored.sent) draw();
  });
}
