import type { components } from "./schema.js";
/** A job, as `GET /jobs/{id}` answers it. */
export type Job = components["schemas"]["Job"];
/** One try at a job. */
export type Attempt = components["schemas"]["Attempt"];
/** A job's state. */
export type JobState = Job["state"];
/** A problem+json answer (RFC 9457), with the members onejob adds. */
export type Problem = components["schemas"]["Problem"] & {
    job_id?: string;
    [member: string]: unknown;
};
/** Where the keys of intents are kept, between retries and reloads. */
export interface KeyStore {
    get(intent: string): string | null | undefined | Promise<string | null | undefined>;
    set(intent: string, key: string): void | Promise<void>;
    delete(intent: string): void | Promise<void>;
}
/** Keys kept for the life of the page or process. */
export declare class MemoryKeyStore implements KeyStore {
    #private;
    get(intent: string): string | undefined;
    set(intent: string, key: string): void;
    delete(intent: string): void;
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
export declare class SessionStorageKeyStore implements KeyStore {
    private readonly storage;
    private readonly prefix;
    constructor(storage?: WebStorage, prefix?: string);
    get(intent: string): string | null;
    set(intent: string, key: string): void;
    delete(intent: string): void;
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
export declare class OnejobError extends Error {
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
    constructor(status: number, problem: Problem | undefined, retryAfter?: number, cause?: unknown);
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
export type FallbackResult = {
    kind: "added";
    attempt: Attempt;
    status: number;
    replayed: boolean;
    key: string;
} | {
    kind: NotNow;
    /** Seconds to wait before asking again, when the server said. */
    retryAfter: number | undefined;
    problem: Problem;
};
/**
 * One event of a job's output (`stream`), with `id`, its durable cursor:
 * `text` to append; `partial`: the answer so far parsed as JSON, with what
 * is open closed (it comes after the `text` that changed it, with the same
 * `id`, and holds everything the one before held); `restart`: discard the
 * text so far, another attempt's answer follows; `waiting`: nothing more
 * happens unless someone acts (see `Awaiting`), and the stream goes on, since
 * a fallback may come; then `result` (the job's validated result) or `error`.
 */
export type OutputEvent = {
    id: string;
    kind: "text";
    attempt: number;
    text: string;
} | {
    id: string;
    kind: "partial";
    attempt: number;
    value: unknown;
} | {
    id: string;
    kind: "restart";
    attempt: number;
} | {
    id: string;
    kind: "waiting";
    awaiting: Awaiting;
} | {
    id: string;
    kind: "result";
    attempt: number;
    result: unknown;
} | {
    id: string;
    kind: "error";
    state: string;
    attempt: number | null;
    error: unknown;
};
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
export type WatchedJob = Job & {
    awaiting?: Awaiting;
};
/** Seconds of a `Retry-After` header: delay-seconds or an HTTP date. */
export declare function retryAfterSeconds(value: string | null): number | undefined;
export declare class OnejobClient {
    #private;
    constructor(options: ClientOptions);
    /**
     * Creates a job, once per intent: the intent's key is made on its first
     * call and reused by every later call and retry of it, so that however
     * many times it is sent it makes one job. Without an `intent`, the call
     * is an intent of its own. With `waitSeconds` (1 to 30), the server
     * answers when the job is finished or that time has passed (`Prefer:
     * wait`), so that a fast job comes back finished in one round trip;
     * `waited` says whether the server waited.
     */
    createJob(job: {
        task: string;
        input: unknown;
        provider?: string;
        maxCost?: string;
    }, options?: {
        intent?: string;
        signal?: AbortSignal;
        waitSeconds?: number;
    }): Promise<Created>;
    /**
     * Adds an attempt on `provider` (a retry on the job's own, or a fallback),
     * once per intent: by default the intent is this job and provider, so a
     * double click adds one attempt; pass a new `intent` for a new one. The
     * answers that mean "not now" are results with how long to wait.
     */
    fallback(jobId: string, provider?: string, options?: {
        intent?: string;
        signal?: AbortSignal;
    }): Promise<FallbackResult>;
    /** Reads a job. */
    getJob(jobId: string, options?: {
        signal?: AbortSignal;
    }): Promise<Job>;
    /** Cancels a job (its running calls are stopped at their providers where they can be). */
    cancel(jobId: string, options?: {
        signal?: AbortSignal;
    }): Promise<Job>;
    /** Forgets an intent's key: its next call is a new intent. */
    forgetIntent(intent: string): Promise<void>;
    /**
     * The job's states as they change, from its event stream, or from
     * long-polls with `ETag` where a stream cannot be had; ends after a
     * terminal state (`succeeded`, `canceled`) or when `signal` aborts. Each
     * change is the whole job, read after the event that changed it; when the
     * stream says the job waits for someone, the job again with `awaiting`
     * (and the watch goes on: a fallback may come).
     */
    watch(jobId: string, options?: {
        signal?: AbortSignal;
        stream?: boolean;
    }): AsyncGenerator<WatchedJob>;
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
    stream(jobId: string, options?: {
        signal?: AbortSignal;
        after?: string;
    }): AsyncGenerator<OutputEvent>;
    /** The intent's key, made and kept on its first use. */
    keyFor(intent: string): Promise<string>;
}
