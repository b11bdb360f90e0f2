// The client against a real `onejob serve` on SQLite, with its built-in
// simulator: `node --test` (the binary is ONEJOB_BIN, or the debug build).
// Lost answers and overloaded proxies are a `fetch` wrapper around the
// real one; everything behind it is the real server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { OnejobClient, OnejobError, SessionStorageKeyStore, retryAfterSeconds } from "../dist/index.js";
import { startServer } from "../scripts/server.mjs";
import { generated } from "../scripts/generate.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

const client = (options = {}) => new OnejobClient({ baseUrl: server.url, token: server.token, ...options });

async function jobCount() {
  const page = await (await fetch(`${server.url}/jobs?limit=100`, { headers: { authorization: `Bearer ${server.token}` } })).json();
  return page.jobs.length;
}

const summarize = (text, provider) => ({ task: "summarize", input: { text }, ...(provider ? { provider } : {}) });

/** Follows a job until `done` holds of it; fails after `seconds`. */
async function until(onejob, id, done, seconds = 30) {
  const signal = AbortSignal.timeout(seconds * 1000);
  for await (const job of onejob.watch(id, { signal })) {
    if (done(job)) return job;
  }
  assert.fail(`job ${id} never got there within ${seconds} s`);
}

test("fifty concurrent createJob calls of one intent make one job", async () => {
  const onejob = client();
  const before = await jobCount();
  const results = await Promise.all(
    Array.from({ length: 50 }, () => onejob.createJob(summarize("fifty clicks, one intent"), { intent: "fifty" })),
  );
  assert.equal(new Set(results.map((r) => r.job.id)).size, 1);
  assert.equal(new Set(results.map((r) => r.key)).size, 1, "one key for the intent");
  assert.equal(results.filter((r) => !r.replayed).length, 1, "one made it, the others were replays");
  assert.equal(await jobCount(), before + 1);
});

test("answers lost after the server did the work are retried with the same key: one job, reported as a replay", async () => {
  let dropped = 0;
  const lossy = async (url, init) => {
    const response = await fetch(url, init);
    if (init?.method === "POST" && dropped < 2) {
      dropped += 1;
      await response.body?.cancel();
      throw new TypeError("fetch failed: the connection was lost");
    }
    return response;
  };
  const before = await jobCount();
  const created = await client({ fetch: lossy, retry: { baseDelayMs: 10 } }).createJob(summarize("the answer was lost twice"));
  assert.equal(dropped, 2);
  assert.equal(created.tries, 3);
  assert.equal(created.replayed, true, "the third try found the job the first made");
  assert.equal(await jobCount(), before + 1);
});

test("503 and 429 are retried no sooner than their Retry-After, with the same key", async () => {
  const keys = [];
  let calls = 0;
  const overloaded = async (url, init) => {
    calls += 1;
    keys.push(init?.headers?.["idempotency-key"]);
    const problem = (status, type) =>
      new Response(JSON.stringify({ type, title: type, status }), {
        status,
        headers: { "content-type": "application/problem+json", "retry-after": "1" },
      });
    if (calls === 1) return problem(503, "service-unavailable");
    if (calls === 2) return problem(429, "rate-limited");
    return fetch(url, init);
  };
  const started = Date.now();
  const created = await client({ fetch: overloaded, retry: { baseDelayMs: 1 } }).createJob(summarize("an overloaded proxy"));
  assert.ok(Date.now() - started >= 2000, `waited ${Date.now() - started} ms for two Retry-After: 1`);
  assert.equal(created.tries, 3);
  assert.equal(new Set(keys).size, 1, "every try carried the intent's key");
  assert.equal(created.replayed, false);
});

test("an answer that says x-should-retry: false is not retried, whatever its status; onejob says it of a reused key", async () => {
  let calls = 0;
  const refusing = async () => {
    calls += 1;
    return new Response(JSON.stringify({ type: "unavailable", title: "Unavailable", status: 503 }), {
      status: 503,
      headers: { "content-type": "application/problem+json", "x-should-retry": "false" },
    });
  };
  await assert.rejects(client({ fetch: refusing }).createJob(summarize("not again")), (error) => error.status === 503);
  assert.equal(calls, 1, "sent once");
  const onejob = client();
  const first = await onejob.createJob(summarize("held"), { intent: "held-by-one" });
  const reused = await fetch(`${server.url}/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.token}`, "idempotency-key": first.key, "content-type": "application/json" },
    body: JSON.stringify(summarize("another payload")),
  });
  assert.equal(reused.status, 409);
  assert.equal(reused.headers.get("x-should-retry"), "false");
});

test("the server's own 429 is waited out", async () => {
  const limited = await startServer((text) =>
    text.replace(/^rate_limit_per_second = .*$/m, "rate_limit_per_second = 1").replace(/^rate_limit_burst = .*$/m, "rate_limit_burst = 1"),
  );
  try {
    const onejob = new OnejobClient({ baseUrl: limited.url, token: limited.token });
    const started = Date.now();
    const [a, b] = await Promise.all([onejob.createJob(summarize("first")), onejob.createJob(summarize("second"))]);
    assert.notEqual(a.job.id, b.job.id, "two intents, two jobs");
    assert.ok(Math.max(a.tries, b.tries) >= 2, "one of them was refused first");
    assert.ok(Date.now() - started >= 900, `the refused one waited: ${Date.now() - started} ms`);
  } finally {
    await limited.stop();
  }
});

test("a creation that waits comes back with its job finished", async () => {
  const onejob = client();
  const created = await onejob.createJob(summarize("one round trip", "sim-fast"), { waitSeconds: 10 });
  assert.equal(created.status, 201);
  assert.equal(created.waited, true);
  assert.equal(created.job.state, "succeeded");
  const plain = await onejob.createJob(summarize("answered at once", "sim-fast"));
  assert.equal(plain.waited, false);
  assert.equal(plain.job.state, "queued");
});

test("4xx other than 408 and 429 are not retried, and come as typed errors", async () => {
  const onejob = client();
  const first = await onejob.createJob(summarize("the first intent"), { intent: "reused" });
  await assert.rejects(onejob.createJob(summarize("another payload"), { intent: "reused" }), (error) => {
    assert.ok(error instanceof OnejobError);
    assert.equal(error.type, "idempotency-key-reused");
    assert.equal(error.status, 409);
    assert.equal(error.jobId, first.job.id);
    return true;
  });
  let calls = 0;
  const counting = (url, init) => {
    calls += 1;
    return fetch(url, init);
  };
  await assert.rejects(client({ fetch: counting }).createJob({ task: "no-such-task", input: {} }), (error) => {
    assert.equal(error.status, 422);
    assert.ok(error.type.length > 0 && typeof error.detail === "string", error.message);
    return true;
  });
  assert.equal(calls, 1, "a 422 is sent once");
});

test("a page reloaded during a stalled request sends the same key from sessionStorage", async () => {
  const storage = new Map();
  const sessionStorage = {
    getItem: (k) => storage.get(k) ?? null,
    setItem: (k, v) => storage.set(k, String(v)),
    removeItem: (k) => storage.delete(k),
  };
  const first = await client({ keyStore: new SessionStorageKeyStore(sessionStorage) }).createJob(summarize("before the reload"), { intent: "form-1" });
  // A new page: a new client, the same session.
  const again = await client({ keyStore: new SessionStorageKeyStore(sessionStorage) }).createJob(summarize("before the reload"), { intent: "form-1" });
  assert.equal(again.job.id, first.job.id);
  assert.equal(again.replayed, true);
});

test("watch sees a sim-hang job unknown, then its reconciled state, and a fallback is told to wait meanwhile", async () => {
  const onejob = client();
  const { job } = await onejob.createJob(summarize("never answered", "sim-hang"));
  const seen = [];
  const unknown = await until(onejob, job.id, (j) => (seen.push(j), j.state === "unknown"));
  assert.equal(unknown.attempts[0].state, "unknown");
  const refused = await onejob.fallback(job.id, "sim-fast");
  assert.equal(refused.kind, "attempt-outcome-unknown");
  assert.ok(refused.retryAfter > 0, `retryAfter: ${refused.retryAfter}`);
  const reconciled = await until(onejob, job.id, (j) => j.attempts[0].state !== "unknown");
  assert.equal(reconciled.attempts[0].state, "failed", "the provider's lookup said it failed");
  assert.ok(seen.some((j) => j.state === "running" || j.state === "queued"), seen.map((j) => j.state).join(" "));
});

test("watch long-polls with ETag where the event stream cannot be had, to a terminal state", async () => {
  const requests = [];
  const noStreams = async (url, init) => {
    requests.push({ url: String(url), etag: init?.headers?.["if-none-match"] });
    if (String(url).endsWith("/events")) return new Response("streams are off here", { status: 503, headers: { "content-type": "text/plain" } });
    return fetch(url, init);
  };
  const onejob = client({ fetch: noStreams });
  const { job } = await onejob.createJob(summarize("followed by long-polls", "sim-slow"));
  const states = [];
  for await (const seen of onejob.watch(job.id, { signal: AbortSignal.timeout(30_000) })) states.push(seen.state);
  assert.equal(states.at(-1), "succeeded", states.join(" "));
  assert.ok(requests.some((r) => r.url.endsWith("/events")), "the stream was tried first");
  assert.ok(requests.some((r) => r.url.includes("?wait=") && r.etag), "then long-polls with the ETag");
});

test("watch ends when its signal aborts", async () => {
  const onejob = client();
  const { job } = await onejob.createJob(summarize("watched, then not", "sim-slow"));
  const controller = new AbortController();
  const states = [];
  for await (const seen of onejob.watch(job.id, { signal: controller.signal })) {
    states.push(seen.state);
    controller.abort();
  }
  assert.equal(states.length, 1);
});

test("a double-clicked fallback adds one attempt", async () => {
  const onejob = client();
  const { job } = await onejob.createJob(summarize("a slow primary", "sim-slow"));
  await until(onejob, job.id, (j) => j.attempts[0].state === "running");
  const [a, b] = await Promise.all([onejob.fallback(job.id, "sim-fast"), onejob.fallback(job.id, "sim-fast")]);
  assert.equal(a.kind, "added");
  assert.equal(b.kind, "added");
  assert.equal(a.attempt.number, b.attempt.number);
  assert.equal([a, b].filter((r) => r.replayed).length, 1, "the second click was a replay");
  const done = await until(onejob, job.id, (j) => j.state === "succeeded");
  assert.equal(done.attempts.length, 2, "one attempt per button intent");
});

test("Retry-After is read as seconds or as an HTTP date", () => {
  assert.equal(retryAfterSeconds("3"), 3);
  assert.equal(retryAfterSeconds(null), undefined);
  assert.equal(retryAfterSeconds("soon"), undefined);
  const inTen = new Date(Date.now() + 10_000).toUTCString();
  assert.ok(retryAfterSeconds(inTen) > 8);
});

test("the checked-in types match the served specification", async () => {
  const checkedIn = readFileSync(fileURLToPath(new URL("../src/schema.ts", import.meta.url)), "utf8");
  assert.ok(checkedIn === (await generated()), "src/schema.ts is stale: run `npm run generate`");
});

test("the package has no runtime dependency and ships only its build", () => {
  const manifest = JSON.parse(readFileSync(fileURLToPath(new URL("../package.json", import.meta.url)), "utf8"));
  assert.equal(manifest.dependencies, undefined);
  const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json"], { cwd: fileURLToPath(new URL("..", import.meta.url)), encoding: "utf8" }));
  const files = packed.files.map((f) => f.path).sort();
  assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), files.join(" "));
  assert.ok(files.every((f) => f.startsWith("dist/") || f === "package.json" || f === "README.md"), files.join(" "));
});

test("installed from its folder into an empty project, the README's example type-checks under strict", () => {
  const client = fileURLToPath(new URL("..", import.meta.url));
  const project = mkdtempSync(join(tmpdir(), "onejob-client-app-"));
  try {
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", client], { cwd: project });
    const readme = readFileSync(join(client, "README.md"), "utf8");
    const example = readme.match(/```ts\n([\s\S]*?)```/)[1];
    // The names the README leaves to the reader.
    const declared = [
      "declare const token: string;",
      "declare const text: string;",
      "declare function render(job: unknown): void;",
      "declare function show(event: unknown): void;",
      "declare function retryIn(seconds: number | undefined): void;",
    ].join("\n");
    writeFileSync(join(project, "app.ts"), `${declared}\n${example}\nexport {};\n`);
    const options = { strict: true, noEmit: true, target: "ES2022", module: "ES2022", moduleResolution: "bundler", lib: ["ES2022", "DOM", "DOM.Iterable"] };
    writeFileSync(join(project, "tsconfig.json"), JSON.stringify({ compilerOptions: options, files: ["app.ts"] }));
    const tsc = join(client, "node_modules", "typescript", "bin", "tsc");
    execFileSync(process.execPath, [tsc, "-p", project], { encoding: "utf8" });
  } catch (error) {
    assert.fail(`${error.message}\n${error.stdout ?? ""}`);
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});

test("stream gives a streaming task's text and partial answers as they come, resumes a dropped connection where it was, and ends with the result", async () => {
  const streaming = await startServer((text) =>
    text
      .replace(/^(\[tasks\.summarize\]\n)/m, "$1stream = true\n")
      .replace(/^(\[providers\.sim-fast\]\n)/m, "$1tokens_per_second = 40\n"),
  );
  try {
    // The first connection is cut after its third event: the client
    // reconnects with Last-Event-ID and nothing comes twice.
    let connections = 0;
    const cutting = async (url, init) => {
      const response = await fetch(url, init);
      if (!String(url).endsWith("/output") || connections++ > 0) return response;
      const reader = response.body.getReader();
      let events = 0;
      const body = new ReadableStream({
        async pull(controller) {
          const { value, done } = await reader.read();
          if (done) return controller.close();
          controller.enqueue(value);
          events += new TextDecoder().decode(value).split("\n\n").length - 1;
          if (events >= 3) {
            await reader.cancel();
            controller.error(new TypeError("terminated: the connection was lost"));
          }
        },
      });
      return new Response(body, { status: response.status, headers: response.headers });
    };
    const onejob = new OnejobClient({ baseUrl: streaming.url, token: streaming.token, fetch: cutting });
    const { job } = await onejob.createJob(summarize("the quick brown fox jumps over the lazy dog"));
    const seen = [];
    for await (const event of onejob.stream(job.id, { signal: AbortSignal.timeout(30_000) })) seen.push(event);
    assert.ok(connections >= 2, "the cut connection was resumed");
    // A partial has the id of the text before it.
    const ids = seen.filter((e) => e.kind !== "partial").map((e) => Number(e.id));
    assert.deepEqual(ids, ids.map((_, i) => i + 1), "every event once, in order");
    assert.ok(seen.filter((e) => e.kind === "text").length > 3, seen.map((e) => e.kind).join(" "));
    const last = seen.at(-1);
    assert.equal(last.kind, "result");
    const text = seen.filter((e) => e.kind === "text").map((e) => e.text).join("");
    assert.deepEqual(JSON.parse(text), last.result, "the text put together is the result");
    const partials = seen.filter((e) => e.kind === "partial");
    assert.ok(partials.length > 1, seen.map((e) => e.kind).join(" "));
    assert.deepEqual(partials.at(-1).value, last.result, "the last partial is the result");
    // A key nobody issued: a typed 401.
    await assert.rejects(
      (async () => {
        for await (const _ of new OnejobClient({ baseUrl: streaming.url, token: "oj_" + "0".repeat(64) }).stream(job.id)) {
          /* nothing comes */
        }
      })(),
      (error) => error instanceof OnejobError && error.status === 401,
    );
  } finally {
    await streaming.stop();
  }
});

test("stream and watch say when a job waits for its user's fallback, and follow the fallback's prose to the result", async () => {
  // The chat task starts on a provider that refuses every request (400),
  // with no failover: only the user's fallback can go on.
  const stuck = await startServer((text) =>
    text.replace(/^(\[tasks\.chat\]\n)default_provider = "sim-chat"\nfailover = \["sim-fast"\]/m, '$1default_provider = "sim-refuses"\nfailover = []') +
      '\n[providers.sim-refuses]\nkind = "sim"\nmodel = "sim-1"\ntokenizer = "o200k_base"\ncontext_tokens = 8192\nmax_output_tokens = 512\nlatency_ms = 5\nerror_rate = 1.0\nerror_status = 400\n',
  );
  try {
    const onejob = new OnejobClient({ baseUrl: stuck.url, token: stuck.token });
    const { job } = await onejob.createJob({ task: "chat", input: { message: "Tell me about fallbacks" } });
    assert.equal(job.provider, "sim-refuses");
    const signal = AbortSignal.timeout(30_000);
    let awaiting;
    for await (const watched of onejob.watch(job.id, { signal })) {
      if (watched.awaiting) {
        awaiting = watched.awaiting;
        break;
      }
    }
    assert.deepEqual([awaiting.state, awaiting.waiting_for, awaiting.attempt], ["failed", "client", 1]);
    const seen = [];
    for await (const event of onejob.stream(job.id, { signal })) {
      seen.push(event);
      if (event.kind === "waiting") assert.equal((await onejob.fallback(job.id, "sim-fast")).kind, "added");
    }
    const kinds = seen.map((event) => event.kind);
    assert.equal(kinds[0], "waiting", kinds.join(" "));
    assert.equal(kinds.at(-1), "result");
    assert.ok(!kinds.includes("partial"), "prose has no partials");
    const text = seen.filter((event) => event.kind === "text").map((event) => event.text).join("");
    assert.equal(text, seen.at(-1).result, "the fallback's prose, put together, is the result");
    assert.equal((await onejob.getJob(job.id)).winning_attempt, 2);
  } finally {
    await stuck.stop();
  }
});
