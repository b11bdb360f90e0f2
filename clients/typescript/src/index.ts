// The onejob client for frontends. What it gets right so that callers do
// not have to:
//
// - One idempotency key per intent. A key is made once per intent
//   (`crypto.randomUUID()`), kept in a key store (memory by default;
//   `sessionStorage` in a browser, so that a reload during a stalled request
//   reuses it) and sent with every retry of that intent. However often the
//   request is sent, and whichever answers are lost, the intent makes one job.
// - Retries that are safe because of that key: network errors, 408, 429 and
//   5xx, with full-jitter exponential backoff, honouring `Retry-After`,
//   bounded in tries and in time. No other 4xx is retried, and no answer
//   that says `x-should-retry: false`.
// - Following a job: the event stream, or long-polls with `ETag` where a
//   stream cannot be had, to a terminal state.
// - Fallbacks as results, not exceptions: the 409s that say "not now" come
//   back typed, with how long to wait.
//
// No runtime dependency: `fetch`, `crypto.randomUUID`, `AbortSignal` and
// `TextDecoder`, in browsers and in Node 20 and later.

import type { components } from "./schema.js";

/** A job, as `GET /jobs/{id}` answers it. */
export type Job = components["schemas"]["Job"];
/** One try at a job. */
export type Attempt = components["schemas"]["Attempt"];
/** A job's state. */
export type JobState = Job["state"];
/** A problem+json answer (RFC 9457), with the members onejob adds. */
export type Problem = components["schemas"]["Problem"] & { job_id?: string; [member: string]: unknown };

/** Where the keys of intents are kept, between retries and reloads. */
export interface KeyStore {
  get(intent: string): string | null | undefined | Promise<string | null | undefined>;
  set(intent: string, key: string): void | Promise<void>;
  delete(intent: string): void | Promise<void>;
}

/** Keys kept for the life of the page or process. */
export class MemoryKeyStore implements KeyStore {
  #keys = new Map<string, string>();
  get(intent: string): string | undefined {
    return this.#keys.get(intent);
  }
  set(intent: string, key: string): void {
    this.#keys.set(intent, key);
  }
  delete(intent: string): void {
    this.#keys.delete(intent);
  }
}

/** The part of the Web Storage API a key store needs. */
export interface WebStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/**
 * Keys kept in `sessionStorage` (or any Web Storage): a page reloaded while
 * its request stalled sends the same key again, and finds the same job.
 */
export class SessionStorageKeyStore implements KeyStore {
  constructor(
    private readonly storage: WebStorage = (globalThis as { sessionStorage?: WebStorage }).sessionStorage as WebStorage,
    private readonly prefix = "onejob:intent:",
  ) {
    if (!storage) throw new TypeError("SessionStorageKeyStore needs sessionStorage (a browser) or a storage to use");
  }
  get(intent: string): string | null {
    return this.storage.getItem(this.prefix + intent);
  }
  set(intent: string, key: string): void {
    this.storage.setItem(this.prefix + intent, key);
  }
  delete(intent: string): void {
    this.storage.removeItem(this.prefix + intent);
  }
}

/** How requests are retried. */
export interface RetryPolicy {
  /** Tries in all, the first included. */
  maxTries: number;
  /** The first backoff's ceiling; each further one doubles, up to `maxDelayMs`. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** No retry starts later than this after the first try. */
  maxElapsedMs: number;
}

const DEFAULT_RETRY: RetryPolicy = { maxTries: 6, baseDelayMs: 250, maxDelayMs: 8_000, maxElapsedMs: 60_000 };

export interface ClientOptions {
  /** Where onejob is, such as `https://onejob.example.com` (its routes are under it). */
  baseUrl: string;
  /** An API key, sent as `Authorization: Bearer`; leave it out when `fetch` authenticates. */
  token?: string;
  /** The `fetch` to use (a wrapper that adds headers or cookies, a test's). */
  fetch?: typeof fetch;
  keyStore?: KeyStore;
  retry?: Partial<RetryPolicy>;
}

/** An answer that is not what was asked for: its problem, typed. */
export class OnejobError extends Error {
  /** The problem type, such as `idempotency-key-reused`; `network-error` when no answer came. */
  readonly type: string;
  /** The HTTP status; 0 when no answer came. */
  readonly status: number;
  readonly detail: string | undefined;
  /** The job the problem is about, when it names one. */
  readonly jobId: string | undefined;
  readonly problem: Problem | undefined;
  /** Seconds the answer asked to wait, when it said. */
  readonly retryAfter: number | undefined;

  constructor(status: number, problem: Problem | undefined, retryAfter?: number, cause?: unknown) {
    const type = problem?.type ?? (status === 0 ? "network-error" : `http-${status}`);
    super(problem?.detail ?? problem?.title ?? (status === 0 ? `no answer: ${String(cause)}` : `HTTP ${status}`), { cause });
    this.name = "OnejobError";
    this.type = type;
    this.status = status;
    this.detail = problem?.detail ?? undefined;
    this.jobId = typeof problem?.job_id === "string" ? problem.job_id : undefined;
    this.problem = problem;
    this.retryAfter = retryAfter;
  }
}

/** What `createJob` got. */
export interface Created {
  job: Job;
  /** 201 when this intent made the job, 200 when it had made it before. */
  status: number;
  /** Whether the server answered from a job this intent had already made. */
  replayed: boolean;
  /** Whether the server waited for the job's end (`waitSeconds`). */
  waited: boolean;
  /** The intent's idempotency key. */
  key: string;
  /** How many times the request was sent. */
  tries: number;
}

/** The refusals of a new attempt that mean "not now". */
export type NotNow = "attempt-outcome-unknown" | "attempt-pending" | "too-many-attempts-in-flight" | "output-streaming";

/** What `fallback` got: an attempt, or why not now. */
export type FallbackResult =
  | { kind: "added"; attempt: Attempt; status: number; replayed: boolean; key: string }
  | {
      kind: NotNow;
      /** Seconds to wait before asking again, when the server said. */
      retryAfter: number | undefined;
      problem: Problem;
    };

const NOT_NOW = new Set<string>([
  "attempt-outcome-unknown",
  "attempt-pending",
  "too-many-attempts-in-flight",
  "output-streaming",
] satisfies NotNow[]);
const TERMINAL = new Set<JobState>(["succeeded", "canceled"]);

/**
 * One event of a job's output (`stream`), with `id`, its durable cursor:
 * `text` to append; `partial`: the answer so far parsed as JSON, with what
 * is open closed (it comes after the `text` that changed it, with the same
 * `id`, and holds everything the one before held); `restart`: discard the
 * text so far, another attempt's answer follows; `waiting`: nothing more
 * happens unless someone acts (see `Awaiting`), and the stream goes on, since
 * a fallback may come; then `result` (the job's validated result) or `error`.
 */
export type OutputEvent =
  | { id: string; kind: "text"; attempt: number; text: string }
  | { id: string; kind: "partial"; attempt: number; value: unknown }
  | { id: string; kind: "restart"; attempt: number }
  | { id: string; kind: "waiting"; awaiting: Awaiting }
  | { id: string; kind: "result"; attempt: number; result: unknown }
  | { id: string; kind: "error"; state: string; attempt: number | null; error: unknown };

/**
 * What a job waits for when nothing more happens to it on its own: `client`,
 * it failed and may take the user's retry or fallback (or a cancel);
 * `operator`, an attempt's outcome is unknown and its provider cannot be
 * asked, so the job's owner or an operator resolves it; `reconciliation`,
 * onejob asks the provider about it.
 */
export interface Awaiting {
  state: JobState;
  waiting_for: "client" | "operator" | "reconciliation";
  attempt: number | null;
  next: string;
}

/** A job as `watch` yields it: with what it waits for, when it waits. */
export type WatchedJob = Job & { awaiting?: Awaiting };

interface Sent {
  response: Response;
  tries: number;
}

interface RequestOptions {
  body?: unknown;
  key?: string;
  signal?: AbortSignal;
  headers?: Record<string, string>;
  /** Answers (by status) returned to the caller rather than thrown. */
  accept?: (status: number) => boolean;
}

/** Seconds of a `Retry-After` header: delay-seconds or an HTTP date. */
export function retryAfterSeconds(value: string | null): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function isAbort(error: unknown, signal?: AbortSignal): boolean {
  return (signal?.aborted ?? false) || (error instanceof Error && error.name === "AbortError");
}

async function problemOf(response: Response): Promise<Problem | undefined> {
  try {
    return (await response.json()) as Problem;
  } catch {
    return undefined;
  }
}

export class OnejobClient {
  readonly #base: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #keys: KeyStore;
  readonly #retry: RetryPolicy;
  /** Keys being made, by intent: concurrent calls of one intent share one. */
  readonly #making = new Map<string, Promise<string>>();

  constructor(options: ClientOptions) {
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#keys = options.keyStore ?? new MemoryKeyStore();
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
  }

  /**
   * Creates a job, once per intent: the intent's key is made on its first
   * call and reused by every later call and retry of it, so that however
   * many times it is sent it makes one job. Without an `intent`, the call
   * is an intent of its own. With `waitSeconds` (1 to 30), the server
   * answers when the job is finished or that time has passed (`Prefer:
   * wait`), so that a fast job comes back finished in one round trip;
   * `waited` says whether the server waited.
   */
  async createJob(
    job: { task: string; input: unknown; provider?: string; maxCost?: string },
    options: { intent?: string; signal?: AbortSignal; waitSeconds?: number } = {},
  ): Promise<Created> {
    const key = await this.keyFor(`create:${options.intent ?? crypto.randomUUID()}`);
    const body: Record<string, unknown> = { task: job.task, input: job.input };
    if (job.provider !== undefined) body.provider = job.provider;
    if (job.maxCost !== undefined) body.max_cost = job.maxCost;
    const headers: Record<string, string> = options.waitSeconds ? { prefer: `wait=${options.waitSeconds}` } : {};
    const { response, tries } = await this.#send("POST", "/jobs", { body, key, headers, signal: options.signal });
    return {
      job: (await response.json()) as Job,
      status: response.status,
      replayed: response.headers.get("idempotent-replayed") === "true",
      waited: response.headers.get("preference-applied")?.startsWith("wait=") ?? false,
      key,
      tries,
    };
  }

  /**
   * Adds an attempt on `provider` (a retry on the job's own, or a fallback),
   * once per intent: by default the intent is this job and provider, so a
   * double click adds one attempt; pass a new `intent` for a new one. The
   * answers that mean "not now" are results with how long to wait.
   */
  async fallback(
    jobId: string,
    provider?: string,
    options: { intent?: string; signal?: AbortSignal } = {},
  ): Promise<FallbackResult> {
    const key = await this.keyFor(`attempt:${options.intent ?? `${jobId}:${provider ?? ""}`}`);
    const body = provider === undefined ? {} : { provider };
    const { response } = await this.#send("POST", `/jobs/${encodeURIComponent(jobId)}/attempts`, {
      body,
      key,
      signal: options.signal,
      accept: (status) => status === 409,
    });
    if (response.status === 409) {
      const problem = (await problemOf(response)) ?? { type: "http-409", title: "Conflict", status: 409 };
      if (!NOT_NOW.has(problem.type)) {
        throw new OnejobError(409, problem, retryAfterSeconds(response.headers.get("retry-after")));
      }
      return {
        kind: problem.type as NotNow,
        retryAfter: retryAfterSeconds(response.headers.get("retry-after")),
        problem,
      };
    }
    return {
      kind: "added",
      attempt: (await response.json()) as Attempt,
      status: response.status,
      replayed: response.headers.get("idempotent-replayed") === "true",
      key,
    };
  }

  /** Reads a job. */
  async getJob(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    const { response } = await this.#send("GET", `/jobs/${encodeURIComponent(jobId)}`, { signal: options.signal });
    return (await response.json()) as Job;
  }

  /** Cancels a job (its running calls are stopped at their providers where they can be). */
  async cancel(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    const { response } = await this.#send("POST", `/jobs/${encodeURIComponent(jobId)}/cancel`, { signal: options.signal });
    return (await response.json()) as Job;
  }

  /** Forgets an intent's key: its next call is a new intent. */
  async forgetIntent(intent: string): Promise<void> {
    await this.#keys.delete(`create:${intent}`);
  }

  /**
   * The job's states as they change, from its event stream, or from
   * long-polls with `ETag` where a stream cannot be had; ends after a
   * terminal state (`succeeded`, `canceled`) or when `signal` aborts. Each
   * change is the whole job, read after the event that changed it; when the
   * stream says the job waits for someone, the job again with `awaiting`
   * (and the watch goes on: a fallback may come).
   */
  async *watch(jobId: string, options: { signal?: AbortSignal; stream?: boolean } = {}): AsyncGenerator<WatchedJob> {
    const { signal } = options;
    let last: Job | undefined;
    const changed = (job: Job) => !last || job.updated_at !== last.updated_at || job.state !== last.state;
    const path = `/jobs/${encodeURIComponent(jobId)}`;
    try {
      const first = (await this.#send("GET", path, { signal })).response;
      let etag = first.headers.get("etag");
      last = (await first.json()) as Job;
      yield last;
      if (TERMINAL.has(last.state)) return;
      if (options.stream !== false) {
        for await (const event of this.#events(jobId, signal)) {
          if (event.kind === "waiting") {
            yield { ...last, awaiting: event.data as Awaiting };
            continue;
          }
          const job = await this.getJob(jobId, { signal });
          if (changed(job)) {
            last = job;
            yield job;
            if (TERMINAL.has(job.state)) return;
          }
        }
      }
      // No stream (or it ended without a terminal state): long-polls, each
      // answered when the job differs from the version last seen.
      for (;;) {
        const headers: Record<string, string> = etag ? { "if-none-match": etag } : {};
        const { response } = await this.#send("GET", `${path}?wait=25`, {
          signal,
          headers,
          accept: (status) => status === 304,
        });
        if (response.status === 304) continue;
        etag = response.headers.get("etag");
        const job = (await response.json()) as Job;
        if (changed(job)) {
          last = job;
          yield job;
          if (TERMINAL.has(job.state)) return;
        }
      }
    } catch (error) {
      if (isAbort(error, signal)) return;
      throw error;
    }
  }

  /**
   * The job's output as it comes (`GET /jobs/{id}/output`): pieces of text
   * to append, each followed by the `partial` answer it made when it changed
   * it (for a JSON task), a `restart` when another attempt's answer replaces
   * the text so far, a `waiting` when the job waits for someone, then the
   * `result` or the `error`, after which it ends. A
   * dropped connection is resumed after the last event seen, so nothing
   * comes twice; a page that kept the last `id` it showed passes it as
   * `after` to go on from there.
   */
  async *stream(jobId: string, options: { signal?: AbortSignal; after?: string } = {}): AsyncGenerator<OutputEvent> {
    const path = `/jobs/${encodeURIComponent(jobId)}/output`;
    const events = this.#sse(path, options.signal, options.after);
    try {
      for await (const { id, kind, data } of events.items) {
        const d = data as Record<string, unknown>;
        const attempt = d.attempt as number;
        if (kind === "delta") yield { id, kind: "text", attempt, text: d.text as string };
        else if (kind === "partial") yield { id, kind: "partial", attempt, value: d.value };
        else if (kind === "restart") yield { id, kind: "restart", attempt };
        else if (kind === "waiting") yield { id, kind: "waiting", awaiting: data as Awaiting };
        else if (kind === "result") yield { id, kind: "result", attempt, result: d.result };
        else if (kind === "error") yield { id, kind: "error", state: d.state as string, attempt: d.attempt as number | null, error: d.error };
      }
    } catch (error) {
      if (isAbort(error, options.signal)) return;
      throw error;
    }
    if (!events.ended()) {
      throw events.refused() ?? new OnejobError(0, undefined, undefined, new Error("the output stream could not be resumed"));
    }
  }

  /**
   * The job's events as they come: the stream, reconnected after the last
   * event seen when it drops; ends when the stream ends (after a terminal
   * event) or cannot be had (the caller then long-polls).
   */
  #events(jobId: string, signal?: AbortSignal): AsyncGenerator<{ id: string; kind: string; data: unknown }> {
    return this.#sse(`/jobs/${encodeURIComponent(jobId)}/events`, signal).items;
  }

  /**
   * Server-Sent Events from `path`, reconnected after the last event seen
   * (or `after`) when the connection drops, five times at most; `ended`
   * says whether the server ended the stream itself.
   */
  #sse(
    path: string,
    signal?: AbortSignal,
    after?: string,
  ): {
    items: AsyncGenerator<{ id: string; kind: string; data: unknown }>;
    ended: () => boolean;
    refused: () => OnejobError | undefined;
  } {
    let ended = false;
    let refused: OnejobError | undefined;
    const items = this.#sseItems(path, signal, after, {
      ended: () => (ended = true),
      refused: (error) => (refused = error),
    });
    return { items, ended: () => ended, refused: () => refused };
  }

  async *#sseItems(
    path: string,
    signal: AbortSignal | undefined,
    after: string | undefined,
    tell: { ended: () => void; refused: (error: OnejobError) => void },
  ): AsyncGenerator<{ id: string; kind: string; data: unknown }> {
    let lastId = after;
    for (let reconnects = 0; reconnects < 5; reconnects++) {
      let response: Response;
      try {
        const headers: Record<string, string> = { accept: "text/event-stream", ...this.#auth() };
        if (lastId) headers["last-event-id"] = lastId;
        response = await this.#fetch(`${this.#base}${path}`, { headers, signal });
      } catch (error) {
        if (isAbort(error, signal)) throw error;
        return;
      }
      const type = response.headers.get("content-type") ?? "";
      if (!response.ok) {
        tell.refused(new OnejobError(response.status, await problemOf(response)));
        return;
      }
      if (!type.startsWith("text/event-stream") || !response.body) {
        await response.body?.cancel();
        return;
      }
      let whole = true;
      try {
        for await (const event of parseEvents(response.body)) {
          lastId = event.id || lastId;
          yield event;
        }
      } catch (error) {
        if (isAbort(error, signal)) throw error;
        whole = false; // dropped: reconnect after the last event seen
      }
      if (whole) {
        tell.ended();
        return;
      }
    }
  }

  /** The intent's key, made and kept on its first use. */
  async keyFor(intent: string): Promise<string> {
    const kept = await this.#keys.get(intent);
    if (kept) return kept;
    let making = this.#making.get(intent);
    if (!making) {
      making = (async () => {
        const again = await this.#keys.get(intent);
        if (again) return again;
        const key = crypto.randomUUID();
        await this.#keys.set(intent, key);
        return key;
      })();
      this.#making.set(intent, making);
      making.finally(() => this.#making.delete(intent)).catch(() => {});
    }
    return making;
  }

  #auth(): Record<string, string> {
    return this.#token ? { authorization: `Bearer ${this.#token}` } : {};
  }

  /** Sends a request, retrying what is safe to retry with the same key. */
  async #send(method: string, path: string, options: RequestOptions): Promise<Sent> {
    const started = Date.now();
    const headers: Record<string, string> = { ...this.#auth(), ...options.headers };
    if (options.key) headers["idempotency-key"] = options.key;
    if (options.body !== undefined) headers["content-type"] = "application/json";
    const body = options.body === undefined ? undefined : JSON.stringify(options.body);
    for (let tries = 1; ; tries++) {
      let failure!: OnejobError;
      let wait: number | undefined;
      try {
        const response = await this.#fetch(`${this.#base}${path}`, { method, headers, body, signal: options.signal });
        if (response.ok || options.accept?.(response.status)) return { response, tries };
        wait = retryAfterSeconds(response.headers.get("retry-after"));
        failure = new OnejobError(response.status, await problemOf(response), wait);
        // The server's word wins (`x-should-retry`); otherwise 408, 429 and 5xx.
        const said = response.headers.get("x-should-retry");
        const retryable =
          said === "true" || (said !== "false" && (response.status === 408 || response.status === 429 || response.status >= 500));
        if (!retryable) throw failure;
      } catch (error) {
        if (error instanceof OnejobError) throw error;
        if (isAbort(error, options.signal)) throw error;
        failure = new OnejobError(0, undefined, undefined, error);
      }
      const { maxTries, baseDelayMs, maxDelayMs, maxElapsedMs } = this.#retry;
      // Full jitter: anywhere up to the doubling ceiling; never sooner than asked.
      const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (tries - 1));
      const delay = Math.max(Math.random() * ceiling, (wait ?? 0) * 1000);
      if (tries >= maxTries || Date.now() - started + delay > maxElapsedMs) throw failure;
      await sleep(delay, options.signal);
    }
  }
}

/** Reads Server-Sent Events from a body: `id`, `event` and `data` of each. */
async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<{ id: string; kind: string; data: unknown }> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        let id = "";
        let kind = "message";
        const data: string[] = [];
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith(":")) continue; // a comment: keeps the connection open
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") id = value;
          else if (field === "event") kind = value;
          else if (field === "data") data.push(value);
        }
        if (data.length === 0) continue;
        const text = data.join("\n");
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          /* not JSON: kept as text */
        }
        yield { id, kind, data: parsed };
      }
    }
  } finally {
    // Stops the stream (and its connection) when the reader stops early.
    await reader.cancel().catch(() => {});
  }
}
