// The dashboard and the demo in a real browser (headless Chromium driven by
// playwright-core), against a server that tests/browser.rs started. Every
// wait has a deadline; nothing sleeps and hopes.
//
// Environment: ONEJOB_URL, ONEJOB_CLIENT_KEY (owner alice), ONEJOB_ADMIN_KEY
// (owner ops), ONEJOB_SCREENSHOTS (a folder), CHROMIUM (the browser binary),
// VITE_CHAT_URL (the built Vite example, clients/typescript/examples/vite-chat,
// served by `vite preview` in front of the same server).

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.ONEJOB_URL;
const clientKey = process.env.ONEJOB_CLIENT_KEY;
const adminKey = process.env.ONEJOB_ADMIN_KEY;
const shots = process.env.ONEJOB_SCREENSHOTS;
const viteChat = process.env.VITE_CHAT_URL;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
assert.ok(base && clientKey && adminKey && shots && viteChat, 'ONEJOB_URL, ONEJOB_CLIENT_KEY, ONEJOB_ADMIN_KEY, ONEJOB_SCREENSHOTS and VITE_CHAT_URL are set');
mkdirSync(shots, { recursive: true });

const WAIT = 20_000;

function step(text) {
  console.log(`browser: ${text}`);
}

// The JSON API as a program would call it, to check what the browser did.
async function api(key, path, init = {}) {
  const response = await fetch(base + path, {
    ...init,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...(init.headers || {}) },
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function waitForJob(key, id, what, done) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const { body } = await api(key, `/jobs/${id}?wait=1`);
    if (done(body)) return body;
    assert.ok(Date.now() < deadline, `job ${id} never reached: ${what}; last seen ${JSON.stringify(body)}`);
  }
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  chromiumSandbox: false,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const failures = [];
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(WAIT);
page.on('pageerror', (error) => failures.push(`page error: ${error.message}`));
// A refused sign-in answers 401 on purpose; the browser logs every such
// answer as an error, so answers are checked here instead: only scripts,
// styles and the fragments the scripts fetch must never fail.
page.on('console', (message) => {
  if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) failures.push(`console error: ${message.text()}`);
});
page.on('response', (response) => {
  const url = response.url();
  if (response.status() >= 400 && (url.includes('/ui/static/') || url.includes('/timeline') || url.includes('/ui/api/'))) {
    failures.push(`${response.status()} from ${url}`);
  }
});

// A job of alice's on sim-slow, which answers after a stall: its id.
async function slowJob(key) {
  const made = await api(clientKey, '/jobs', {
    method: 'POST', headers: { 'Idempotency-Key': key },
    body: JSON.stringify({ task: 'summarize', input: { text: 'followed live' }, provider: 'sim-slow' }),
  });
  assert.equal(made.status, 201);
  return made.body.id;
}

async function signIn(key) {
  await page.goto(`${base}/ui/signin`);
  await page.fill('#token', key);
  await page.click('#signin');
  await page.waitForURL(`${base}/ui`);
}

async function signOut() {
  await page.click('form.who button');
  await page.waitForURL(/\/ui\/signin$/);
}

try {
  // Sign-in: a wrong key is refused, a live one signs in; the page never
  // puts the key in an address.
  step('sign in');
  await page.goto(`${base}/demo`);
  await page.waitForURL(/\/ui\/signin\?next=%2Fdemo$/);
  await page.fill('#token', 'oj_' + '0'.repeat(64));
  await page.click('#signin');
  await page.locator('.signin .error').waitFor();
  assert.ok(!page.url().includes('oj_'), 'the key is never in the address');
  await page.fill('#token', clientKey);
  await page.click('#signin');
  await page.waitForURL(`${base}/demo`);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'onejob_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', `an HttpOnly, SameSite=Strict session cookie: ${JSON.stringify(cookies)}`);
  assert.ok(!JSON.stringify(cookies).includes(clientKey), 'the cookie does not hold the key');

  // The demo runs on the TypeScript client, served from the binary.
  await page.locator('#demo[data-client="onejob-client"]').waitFor();
  const scripts = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname));
  assert.ok(scripts.includes('/ui/static/onejob-client.js'), `the client was loaded: ${scripts}`);

  // Generate, double-clicked: two requests with one key, one job.
  step('double-click Generate');
  const intentKey = await page.locator('#intent-key').textContent();
  const creates = [];
  const eventStreams = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && request.url().endsWith('/ui/api/jobs')) creates.push(request.headers()['idempotency-key']);
    if (request.resourceType() === 'eventsource') eventStreams.push(new URL(request.url()).pathname);
  });
  await page.dblclick('#generate');
  await page.locator('#requests li:nth-child(2)').waitFor();
  const generateLog = await page.locator('#requests li').allTextContents();
  assert.equal(creates.length, 2, `the double click sent two requests: ${creates}`);
  assert.deepEqual(creates, [intentKey, intentKey], 'both with the intent key');
  const jobIds = generateLog.map((line) => line.match(/[0-9a-f-]{36}$/)[0]);
  assert.equal(jobIds[0], jobIds[1], `both answered with one job: ${generateLog}`);
  assert.ok(generateLog.some((line) => line.includes('→ 201')) && generateLog.some((line) => line.includes('replayed')), `one created, one replayed: ${generateLog}`);
  const jobId = jobIds[0];
  const listed = await api(clientKey, '/jobs?limit=100');
  assert.deepEqual(listed.body.jobs.map((j) => j.id), [jobId], 'alice has exactly one job');

  // The stall on sim-slow, then the fallback, double-clicked: one attempt.
  step('stall, then double-click the fallback');
  // The person waits a second on the stalled provider, then presses the
  // fallback: the stall counter says how long it has been.
  await page.waitForFunction(() => {
    const line = document.querySelector('#status.stall');
    const seconds = line && line.textContent.match(/working for ([0-9.]+) s/);
    return seconds && Number(seconds[1]) >= 1.0;
  }, null, { timeout: WAIT });
  await page.locator('#fallback:enabled').waitFor();
  await page.dblclick('#fallback');
  await page.locator('#requests li:nth-child(4)').waitFor();
  const fallbackLog = (await page.locator('#requests li').allTextContents()).slice(2);
  assert.ok(fallbackLog.every((line) => line.includes('attempt #2 on sim-fast')), `both clicks name attempt #2: ${fallbackLog}`);
  assert.ok(fallbackLog.some((line) => line.includes('→ 201')) && fallbackLog.some((line) => line.includes('replayed')), `one added, one replayed: ${fallbackLog}`);

  // The fallback wins; the slow attempt's call is aborted, and it ends canceled.
  step('the race and its winner');
  await page.locator('#timeline-box[data-settled="true"]').waitFor();
  const bars = page.locator('#timeline-box svg.timeline g.attempt');
  assert.equal(await bars.count(), 2, 'two bars');
  assert.equal(await page.locator('#timeline-box g.attempt[data-attempt="1"]').getAttribute('data-state'), 'canceled');
  assert.equal(await page.locator('#timeline-box g.attempt[data-attempt="2"]').getAttribute('data-state'), 'succeeded');
  assert.equal(await page.locator('#timeline-box g.attempt[data-winner="true"]').count(), 1, 'one winner');
  assert.equal(await page.locator('#timeline-box g.attempt[data-winner="true"]').getAttribute('data-attempt'), '2');
  assert.equal(await page.locator('#timeline-box rect.run').count(), 2, 'both attempts have a run bar');
  await page.locator('#timeline-box tr.event[data-kind="attempt-canceled"]').waitFor();
  assert.match(await page.locator('#status').textContent(), /attempt #2 on sim-fast won/);
  await page.screenshot({ path: join(shots, 'demo.png'), fullPage: true });
  // The demo followed its job from the job's event stream.
  assert.deepEqual(eventStreams, [`/ui/api/jobs/${jobId}/events`], 'one EventSource, on the job');
  assert.ok(Number(await page.locator('#timeline-box').getAttribute('data-streamed')) >= 3, 'the stream brought the race');
  const job = await api(clientKey, `/jobs/${jobId}`);
  assert.deepEqual(job.body.attempts.map((a) => [a.number, a.provider, a.state]), [[1, 'sim-slow', 'canceled'], [2, 'sim-fast', 'succeeded']]);
  assert.equal(job.body.winning_attempt, 2);

  // The answer came from the job's output; the fallback's, whole.
  await page.locator('#answer[data-state="result"]').waitFor();
  // The task answers prose: the result is its text, a JSON string.
  assert.equal(typeof job.body.result, 'string', 'the demo task answers prose');
  assert.equal(await page.locator('#answer').textContent(), job.body.result, 'the answer is the result');

  // A new intent on sim-slow, whose prose streams: reloaded at its first
  // tokens, the page sends the tab's intent again with its key, finds the
  // same job, and reads its output from the start: the text so far, then
  // the rest, the whole answer once.
  step('reload mid-stream');
  await page.click('#again');
  await page.waitForFunction((before) => document.querySelector('#intent-key').textContent !== before, intentKey);
  await page.click('#generate');
  await page.locator('#answer[data-state="streaming"]').waitFor({ timeout: WAIT });
  const before = await page.locator('#answer').textContent();
  const streamedJob = (await page.locator('#requests li').first().textContent()).match(/[0-9a-f-]{36}$/)[0];
  await page.reload();
  await page.locator('#answer[data-state="result"]').waitFor({ timeout: WAIT });
  const again = await page.locator('#requests li').allTextContents();
  assert.ok(again.length === 1 && again[0].includes('replayed: the same job ' + streamedJob), `the reload found the same job: ${again}`);
  const streamed = await api(clientKey, `/jobs/${streamedJob}`);
  const whole = await page.locator('#answer').textContent();
  assert.ok(before.length > 0 && before.length < whole.length && whole.startsWith(before), `reloaded mid-stream: ${before} / ${whole}`);
  assert.equal(whole, streamed.body.result, 'the whole prose answer, once');
  assert.equal(await page.locator('#answer').getAttribute('data-restarts'), null, 'one attempt streamed: no restart');
  assert.equal(streamed.body.attempts.length, 1, 'one inference');
  await page.screenshot({ path: join(shots, 'demo-stream.png'), fullPage: true });

  // Draw, double-clicked, then reloaded while the picture is drawn: every
  // request carries the picture intent's key, one job, one prediction, and
  // the picture onejob kept is shown.
  step('double-click Draw, reload while it draws');
  const drawKey = await page.locator('#image-key').textContent();
  const draws = [];
  const onDraw = (request) => {
    if (request.method() === 'POST' && request.url().endsWith('/ui/api/jobs') && request.postData().includes('"image"')) draws.push(request.headers()['idempotency-key']);
  };
  page.on('request', onDraw);
  await page.dblclick('#draw');
  await page.locator('#image-status', { hasText: 'drawing' }).waitFor();
  await page.reload();
  await page.locator('#picture img').waitFor({ timeout: WAIT });
  page.off('request', onDraw);
  assert.ok(draws.length >= 3 && draws.every((key) => key === drawKey), `two clicks and a reload, one key: ${draws}`);
  const drawnJob = (await page.locator('#image-status').textContent()).match(/job ([0-9a-f-]{36})/)[1];
  const drawn = await api(clientKey, `/jobs/${drawnJob}`);
  assert.equal(drawn.body.state, 'succeeded');
  assert.equal(drawn.body.attempts.length, 1, 'one prediction');
  assert.equal(await page.locator('#picture img').getAttribute('data-sha256'), drawn.body.result.sha256);
  assert.ok(await page.locator('#picture img').evaluate((img) => img.complete && img.naturalWidth > 0), 'the kept picture loads');
  await page.screenshot({ path: join(shots, 'demo-image.png'), fullPage: true });
  // Its job page shows it as a thumbnail.
  await page.goto(`${base}/ui/jobs/${drawnJob}`);
  await page.locator('#files img').waitFor();
  assert.ok(await page.locator('#files img').evaluate((img) => img.complete && img.naturalWidth > 0), 'the thumbnail loads');
  await page.goto(`${base}/demo`);

  // The job page: request, fingerprint, result, the timeline with both bars.
  step('job page');
  await page.goto(`${base}/ui/jobs/${jobId}`);
  assert.equal(await page.locator('.fingerprint').first().textContent(), job.body.fingerprint);
  await page.locator('#result').waitFor();
  // What the job cost: the winner plus the canceled loser's waste, as the API says.
  const cost = await page.locator('#job-cost').textContent();
  assert.ok(job.body.cost && cost.includes(job.body.cost.total) && cost.includes(`waste ${job.body.cost.waste}`), cost);
  assert.equal(await page.locator('svg.timeline rect.run').count(), 2);
  assert.equal(await page.locator('svg.timeline g.winner').count(), 1);
  await page.locator('.timeline-figure').screenshot({ path: join(shots, 'timeline.png') });
  await page.screenshot({ path: join(shots, 'job.png'), fullPage: true });

  // A job page follows a running job from its event stream: one
  // EventSource, and the progress reloaded only when an event came (a poll
  // would reload every 400 ms while sim-slow works for 4 s).
  step('job page follows the stream');
  const followed = await slowJob('browser-stream-1');
  const requests = [];
  const seen = (request) => {
    const path = new URL(request.url()).pathname;
    if (path.startsWith(`/ui/jobs/${followed}/`) || path.startsWith(`/ui/api/jobs/${followed}/`)) requests.push([request.resourceType(), path]);
  };
  page.on('request', seen);
  await page.goto(`${base}/ui/jobs/${followed}`);
  await page.locator('#timeline-box[data-following="stream"]').waitFor();
  await page.locator('#timeline-box[data-settled="true"]').waitFor();
  page.off('request', seen);
  assert.equal(await page.locator('#job-state').textContent(), 'succeeded');
  assert.equal(await page.locator('#timeline-box').getAttribute('data-following'), 'stream', 'the stream never failed');
  assert.deepEqual(requests.filter(([type]) => type === 'eventsource').map(([, path]) => path), [`/ui/api/jobs/${followed}/events`]);
  const reloads = requests.filter(([, path]) => path.endsWith('/timeline')).length;
  const streamedEvents = Number(await page.locator('#timeline-box').getAttribute('data-streamed'));
  assert.ok(reloads >= 1 && reloads <= streamedEvents, `reloaded only on events: ${reloads} reloads for ${streamedEvents} events`);

  // Without the stream, the page polls, and still shows the job finish.
  step('job page falls back to polling');
  const polled = await slowJob('browser-stream-2');
  await page.route('**/ui/api/jobs/*/events*', (route) => route.abort());
  await page.goto(`${base}/ui/jobs/${polled}`);
  await page.locator('#timeline-box[data-following="poll"]').waitFor();
  await page.locator('#timeline-box[data-settled="true"]').waitFor();
  assert.equal(await page.locator('#job-state').textContent(), 'succeeded');
  await page.unroute('**/ui/api/jobs/*/events*');

  // The jobs list: filters, search by key and by id, live refresh.
  step('jobs list');
  await page.goto(`${base}/ui?state=succeeded`);
  assert.equal(await page.locator(`tr[data-job="${jobId}"]`).count(), 1);
  await page.goto(`${base}/ui?state=failed`);
  assert.equal(await page.locator('table.jobs tbody tr').count(), 0);
  await page.goto(`${base}/ui?q=${encodeURIComponent(intentKey)}`);
  assert.equal(await page.locator(`tr[data-job="${jobId}"]`).count(), 1, 'found by its idempotency key');
  await page.goto(`${base}/ui?q=${jobId}`);
  await page.waitForURL(`${base}/ui/jobs/${jobId}`);
  await page.goto(`${base}/ui`);
  const made = await api(clientKey, '/jobs', {
    method: 'POST', headers: { 'Idempotency-Key': 'browser-live-1' },
    body: JSON.stringify({ task: 'summarize', input: { text: 'shown without a reload' }, provider: 'sim-fast' }),
  });
  assert.equal(made.status, 201);
  await page.locator(`tr[data-job="${made.body.id}"]`).waitFor();
  await page.screenshot({ path: join(shots, 'jobs.png'), fullPage: true });

  // Unknown attempts: a sim-hang attempt, listed with its age and provider,
  // resolved from the page by an admin (it is alice's).
  step('unknown attempts');
  const hung = await api(clientKey, '/jobs', {
    method: 'POST', headers: { 'Idempotency-Key': 'browser-hang-1' },
    body: JSON.stringify({ task: 'summarize', input: { text: 'never answered' }, provider: 'sim-hang' }),
  });
  assert.equal(hung.status, 201);
  await waitForJob(clientKey, hung.body.id, 'attempt 1 unknown', (j) => j.attempts[0].state === 'unknown');
  await signOut();
  await signIn(adminKey);
  await page.goto(`${base}/ui/unknown`);
  const row = page.locator(`tr[data-job="${hung.body.id}"][data-attempt="1"]`);
  await row.waitFor();
  assert.match(await row.textContent(), /sim-hang/);
  assert.match(await row.textContent(), /alice/);
  assert.match(await row.locator('.age').textContent(), /\d+(\.\d)? s|min/);
  await page.screenshot({ path: join(shots, 'unknown.png'), fullPage: true });
  await row.locator('input[name="reason"]').fill('the provider console shows no such request');
  await row.locator('button[type="submit"]').click();
  await page.locator('.notice').waitFor();
  assert.equal(await page.locator(`tr[data-job="${hung.body.id}"]`).count(), 0, 'no longer listed');
  const settled = await api(clientKey, `/jobs/${hung.body.id}`);
  assert.equal(settled.body.attempts[0].state, 'failed');
  assert.equal(settled.body.attempts[0].error.message, 'the provider console shows no such request');
  await page.goto(`${base}/ui/jobs/${hung.body.id}`);
  await page.locator('svg.timeline rect.unknown-span').waitFor();
  await page.locator('tr.event[data-kind="attempt-resolved"]').waitFor();

  // Providers: each provider's qualification per task with the last report.
  step('providers');
  await page.goto(`${base}/ui/providers`);
  assert.equal(await page.locator('section.provider[data-provider="sim-fast"] tr[data-task="summarize"]').getAttribute('data-state'), 'qualified');
  assert.equal(await page.locator('section.provider[data-provider="sim-bad-json"] tr[data-task="summarize"]').getAttribute('data-state'), 'failed');
  await page.screenshot({ path: join(shots, 'providers.png'), fullPage: true });

  // The Vite example: a message's prose streams in; reloaded mid-answer,
  // the page sends the message again with its key, finds the same job, and
  // shows the text so far once, then the rest: the whole answer, once.
  step('the Vite chat example');
  const chat = await context.newPage();
  chat.setDefaultTimeout(WAIT);
  chat.on('pageerror', (error) => failures.push(`vite chat: ${error.message}`));
  await chat.goto(viteChat);
  await chat.fill('#token', clientKey);
  await chat.locator('#token').dispatchEvent('change');
  await chat.fill('#message', 'What does an idempotency key do, in a chat?');
  await chat.click('#send');
  await chat.locator('#answer[data-state="streaming"]').waitFor();
  const firstJob = await chat.locator('body').getAttribute('data-job');
  const soFar = await chat.locator('#answer').textContent();
  await chat.reload();
  await chat.locator('#answer[data-state="result"]').waitFor();
  assert.equal(await chat.locator('body').getAttribute('data-replayed'), 'true', 'the reload sent the same intent again');
  assert.equal(await chat.locator('body').getAttribute('data-job'), firstJob, 'and found the same job');
  const chatJob = await api(clientKey, `/jobs/${firstJob}`);
  const prose = await chat.locator('#answer').textContent();
  assert.equal(typeof chatJob.body.result, 'string');
  assert.equal(prose, chatJob.body.result, 'the whole prose answer, once');
  assert.ok(soFar.length > 0 && soFar.length < prose.length && prose.startsWith(soFar), `reloaded mid-answer: ${soFar} / ${prose}`);
  assert.equal(chatJob.body.attempts.length, 1, 'one inference');
  await chat.screenshot({ path: join(shots, 'vite-chat.png'), fullPage: true });
  await chat.close();

  assert.deepEqual(failures, [], 'no script errors');
  step('all passed');
} catch (error) {
  await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
  console.error(`browser: failed at ${page.url()}`);
  if (failures.length) console.error(failures.join('\n'));
  throw error;
} finally {
  await browser.close();
}
