// The demo: one idempotency key per intent, made here once and sent with
// every click and retry of that intent. The buttons are never disabled to
// stop a double click: the key makes the second click the same request.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const demo = $('demo');
  if (!demo) return;
  const slow = demo.dataset.slow;
  const fast = demo.dataset.fast;

  function newKey(prefix) {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes);
    return prefix + '-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  let intentKey;      // the Generate intent's key
  let fallbackKey;    // the fallback intent's key, made with the job
  let job = null;     // the job the intent made
  let follower = null;
  let stallTimer = null;
  let stallSince = null; // when this page first saw attempt #1 running

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

  function startIntent() {
    intentKey = newKey('demo');
    fallbackKey = null;
    job = null;
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

  async function send(url, key, body) {
    const response = await fetch(url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key, 'X-CSRF-Token': OneJob.csrf() },
      body: JSON.stringify(body),
    });
    let data = null;
    try { data = await response.json(); } catch (e) { /* no body */ }
    return { status: response.status, replayed: response.headers.get('idempotent-replayed') === 'true', data };
  }

  function problem(answer) {
    const data = answer.data || {};
    return (data.title || 'HTTP ' + answer.status) + (data.detail ? ': ' + data.detail : '');
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
    follower = OneJob.followTimeline(box, onProgress);
  }

  $('generate').addEventListener('click', async () => {
    const key = intentKey;
    const body = { task: 'summarize', input: { text: $('text').value }, provider: slow };
    let answer;
    try {
      answer = await send('/ui/api/jobs', key, body);
    } catch (e) {
      log('POST /jobs, key ' + key + ': no answer (' + e.message + ')');
      status('The request got no answer. Click Generate again: it sends the same key, so it cannot make a second job.', 'error');
      return;
    }
    if (key !== intentKey) return; // a new intent was started meanwhile
    if (answer.status === 201 || answer.status === 200) {
      job = answer.data;
      if (!fallbackKey) fallbackKey = newKey('fallback');
      showKeys();
      log('POST /jobs, key ' + key + ' → ' + answer.status + (answer.replayed ? ' replayed: the same job ' : ' created job ') + job.id);
      follow(job.id);
    } else {
      log('POST /jobs, key ' + key + ' → ' + answer.status + ' ' + problem(answer));
      status(problem(answer), 'error');
    }
  });

  $('fallback').addEventListener('click', async () => {
    if (!job || !fallbackKey) return;
    const key = fallbackKey;
    let answer;
    try {
      answer = await send('/ui/api/jobs/' + encodeURIComponent(job.id) + '/attempts', key, { provider: fast });
    } catch (e) {
      log('POST /jobs/…/attempts, key ' + key + ': no answer (' + e.message + ')');
      status('The fallback request got no answer. Click it again: the same key cannot add a second attempt.', 'error');
      return;
    }
    if (answer.status === 201 || answer.status === 200) {
      log('POST /jobs/…/attempts, key ' + key + ' → ' + answer.status + (answer.replayed ? ' replayed: the same attempt #' : ' added attempt #') + answer.data.number + ' on ' + answer.data.provider);
    } else {
      log('POST /jobs/…/attempts, key ' + key + ' → ' + answer.status + ' ' + problem(answer));
      status(problem(answer), 'error');
    }
  });

  $('again').addEventListener('click', startIntent);
  startIntent();
})();
