export interface paths {
    "/callbacks/{job}/{number}/{token}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["provider_callback"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/docs": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A readable page of the specification, rendered here. */
        get: operations["docs"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["healthz"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["list_jobs"];
        put?: never;
        post: operations["create_job"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["get_job"];
        put?: never;
        post?: never;
        /**
         * Erases a finished job now, with its attempts and events; what it cost
         *     stays in the usage report, and its key is free.
         */
        delete: operations["erase_job"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/attempts": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["create_attempt"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/attempts/{number}/resolve": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Any key may resolve its own owner's unknown attempts; an operator key,
         *     any owner's (found by job id and number among unknown attempts), and is
         *     answered with where another owner's job stands, not with the job.
         */
        post: operations["resolve_attempt"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/cancel": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Cancels a job unless it succeeded: its pending attempts are canceled;
         *     running ones finish and are recorded, never applied.
         */
        post: operations["cancel_job"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["job_events"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/files/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["job_file"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/output": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["job_output"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/keys/{id}/revoke": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["revoke_key"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["render_metrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/openapi.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The specification. */
        get: operations["openapi_json"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/providers": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["list_providers"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/providers/{name}/breaker": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["set_breaker"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/providers/{name}/qualifications": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["run_qualification"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/readyz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["readyz"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/usage": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["usage_report"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/webhooks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["list_webhooks"];
        put?: never;
        post: operations["create_webhook"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/webhooks/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        delete: operations["delete_webhook"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/webhooks/{id}/deliveries": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["list_deliveries"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/webhooks/{id}/rotate-secret": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["rotate_secret"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /** @description One try at a job. */
        Attempt: {
            cost?: null | components["schemas"]["Cost"];
            /**
             * Format: date-time
             * @description When it was admitted.
             */
            created_at: string;
            /** @description What went wrong, for failed and unknown attempts: `{type, message, detail}`. */
            error?: Record<string, never> | null;
            /**
             * Format: date-time
             * @description When it reached a final or unknown state.
             */
            finished_at?: string | null;
            /**
             * Format: uuid
             * @description The id sent to the provider as its request and idempotency id (I6).
             */
            id: string;
            /** @description The key of the request that added it; none for a job's first attempt. */
            idempotency_key?: string | null;
            /**
             * Format: date-time
             * @description Until when that worker's claim holds.
             */
            lease_until?: string | null;
            /**
             * Format: date-time
             * @description Not claimed before this (retry backoff).
             */
            not_before: string;
            /**
             * Format: int32
             * @description 1 for the first attempt, then 2, 3, …
             */
            number: number;
            /** @description Who started it. */
            origin: components["schemas"]["AttemptOrigin"];
            /**
             * @description The output, for succeeded and superseded attempts: an object, or
             *     for a prose task a string.
             */
            output?: unknown;
            /** @description The provider it runs on. */
            provider: string;
            /**
             * @description The provider's own id of this attempt's request, when it gave one:
             *     a background response's id (`resp_…`), by which it is asked about
             *     and canceled. Kept as soon as the provider answers with it.
             */
            provider_request_id?: string | null;
            /**
             * Format: date-time
             * @description When a worker claimed it.
             */
            started_at?: string | null;
            /** @description Where it is in its state machine. */
            state: components["schemas"]["AttemptState"];
            trace?: null | components["schemas"]["TraceContext"];
            /**
             * @description An output the provider gave that did not become this attempt's
             *     output, kept for audit and never validated: one that broke the
             *     task's contract, or one that came after the attempt was settled.
             *     `{why, received_at, output}`, or past 64 KiB `{why, received_at,
             *     truncated: true, text}` with the output's first 64 KiB of JSON text.
             */
            unapplied_output?: Record<string, never> | null;
            usage?: null | components["schemas"]["Usage"];
            /** @description The worker holding it while running. */
            worker?: string | null;
        };
        /**
         * @description Who started an attempt.
         * @enum {string}
         */
        AttemptOrigin: "client" | "policy" | "hedge";
        /**
         * @description The state of one try.
         * @enum {string}
         */
        AttemptState: "pending" | "running" | "succeeded" | "failed" | "unknown" | "superseded" | "canceled";
        /** @description An attempt with its job. */
        AttemptWithJob: components["schemas"]["Attempt"] & {
            /**
             * Format: uuid
             * @description The job.
             */
            job_id: string;
        };
        /** @description `POST /providers/{name}/breaker` body. */
        BreakerBody: {
            /** @description Why, for the providers' listing and the log. */
            reason: string;
            /** @description `open` (until closed by hand) or `closed`. */
            state: components["schemas"]["BreakerBodyState"];
        };
        /**
         * @description The states an operator may set a breaker to.
         * @enum {string}
         */
        BreakerBodyState: "open" | "closed";
        /** @description What an attempt cost, and by which price. */
        Cost: {
            /**
             * @description The exact amount, a decimal string.
             * @example 0.000123
             */
            amount: string;
            /** @description Its currency. */
            currency: string;
            /** @description Which price was used: `sha256:` and 16 hex digits of the price. */
            price_version: string;
        };
        /** @description `POST /jobs/{id}/attempts` body (or no body at all). */
        CreateAttemptBody: {
            /** @description A configured provider; the job's own when left out. */
            provider?: string | null;
        };
        /** @description `POST /jobs` body. */
        CreateJobBody: {
            /**
             * @description The task's input: any JSON value, which the task's input schema
             *     then checks.
             */
            input: unknown;
            /**
             * @description The most the job's attempts may cost together, a decimal string in
             *     the providers' currency (at most 18 decimals). Part of the intent:
             *     the same key with another `max_cost` is a conflict.
             * @example 0.05
             */
            max_cost?: string | null;
            /** @description A configured provider; the task's default when left out. */
            provider?: string | null;
            /** @description A configured task. */
            task: string;
        };
        /** @description `POST /webhooks` body. */
        CreateWebhookBody: {
            /** @description For people (at most 500 characters). */
            description?: string | null;
            /**
             * @description What it hears of: `job.succeeded`, `job.failed`, `job.unknown`,
             *     `job.canceled`, `attempt.unknown`, `attempt.superseded`.
             */
            events: string[];
            /**
             * @description Where deliveries are posted: `https://` on a public address (hosts
             *     in `webhooks.allow_hosts` excepted).
             */
            url: string;
        };
        /** @description Whether the database's commits wait for a standby, and what says so. */
        DatabaseReplication: {
            /**
             * @description Whether a commit returns only once a synchronous standby has it, so
             *     that a failover to that standby loses no acknowledged job. Also the
             *     gauge `onejob_database_commit_waits_for_standby`.
             */
            commit_waits_for_standby: boolean;
            /**
             * Format: int64
             * @description Standbys streaming from the server when last read.
             */
            standbys: number;
            /** @description The server's `synchronous_commit`. */
            synchronous_commit: string;
            /** @description The server's `synchronous_standby_names` (empty: none). */
            synchronous_standby_names: string;
        };
        /**
         * @description What the report's groups are.
         * @enum {string}
         */
        GroupBy: "provider" | "task" | "day";
        /** @description One intent: what the owner asked for and how it ended. */
        Job: {
            /** @description Every attempt, by number. */
            attempts: components["schemas"]["Attempt"][];
            /**
             * @description The numbers of a canceled job's attempts that are still `running`
             *     and being canceled: their calls are aborted (the task's
             *     `cancel_losers`) and each ends `canceled` as soon as its worker
             *     hears. Empty otherwise.
             */
            canceling: number[];
            cost?: null | components["schemas"]["JobCost"];
            /**
             * Format: date-time
             * @description When the job was accepted.
             */
            created_at: string;
            /**
             * Format: date-time
             * @description When this job, finished and with no attempt open, will be purged and
             *     its idempotency key freed (its last change plus its task's
             *     retention); `null` while it is not finished, since such a job is
             *     never purged.
             */
            expires_at?: string | null;
            /**
             * @description What the intent was, for replay checks: `sha256:<hex>`.
             * @example sha256:7e6ae513…
             */
            fingerprint: string;
            /**
             * Format: uuid
             * @description The job's id.
             */
            id: string;
            /** @description The key the job was created with. */
            idempotency_key: string;
            /** @description The task's input, as sent. */
            input: Record<string, never>;
            /**
             * @description The most its attempts may cost together, as the create request set
             *     it (the task's `max_cost` may be lower): a decimal string.
             * @example 0.05
             */
            max_cost?: string | null;
            /** @description The primary provider. */
            provider: string;
            /**
             * @description The winner's output: an object, or for a task whose output schema
             *     is a string schema (prose), a string.
             */
            result?: unknown;
            /** @description The derived, stored state. */
            state: components["schemas"]["JobState"];
            /** @description The task's name. */
            task: string;
            /**
             * Format: date-time
             * @description When its state last changed.
             */
            updated_at: string;
            waiting?: null | components["schemas"]["Waiting"];
            /**
             * Format: int32
             * @description The number of the attempt that won, once one has.
             */
            winning_attempt?: number | null;
        };
        /**
         * @description What a job's attempts cost: the total is the winner's cost plus the
         *     waste (attempts that were charged, or may have been, without producing
         *     the result: superseded, failed after the provider answered, unknown).
         */
        JobCost: {
            /** @description The currency of every amount. */
            currency: string;
            /**
             * @description Whether any part is an estimate (an attempt whose usage the provider
             *     never reported).
             */
            estimated: boolean;
            /**
             * @description Every attempt's cost: `winner + waste`. A decimal string.
             * @example 0.000131
             */
            total: string;
            /**
             * @description The cost of the attempts that did not produce the result.
             * @example 0.000066
             */
            waste: string;
            /**
             * @description The winning attempt's cost (`0` until one wins).
             * @example 0.000065
             */
            winner: string;
        };
        /** @description A page of jobs. */
        JobPage: {
            /** @description Newest first. */
            jobs: components["schemas"]["JobSummary"][];
            /** @description Pass as `cursor` for the next page; null on the last. */
            next_cursor?: string | null;
        };
        /**
         * @description The state of one intent, derived from its attempts and stored with them.
         * @enum {string}
         */
        JobState: "queued" | "running" | "unknown" | "failed" | "succeeded" | "canceled";
        /** @description A job without its attempts, for listings. */
        JobSummary: {
            /**
             * Format: date-time
             * @description When the job was accepted.
             */
            created_at: string;
            /**
             * Format: uuid
             * @description The job's id.
             */
            id: string;
            /** @description The key the job was created with. */
            idempotency_key: string;
            /** @description The primary provider. */
            provider: string;
            /** @description The derived, stored state. */
            state: components["schemas"]["JobState"];
            /** @description The task's name. */
            task: string;
            /**
             * Format: date-time
             * @description When its state last changed.
             */
            updated_at: string;
            /**
             * Format: int32
             * @description The number of the attempt that won, once one has.
             */
            winning_attempt?: number | null;
        };
        /**
         * @description How an operator settles an unknown attempt.
         * @enum {string}
         */
        Outcome: "succeeded" | "failed";
        /**
         * @description An RFC 9457 problem. `type` is one of: idempotency-key-missing,
         *     idempotency-key-invalid, header-repeated, unauthorized, forbidden, not-found,
         *     method-not-allowed, idempotency-key-reused, job-finished, attempt-pending,
         *     attempt-outcome-unknown, too-many-attempts-in-flight, attempt-limit-reached,
         *     attempt-not-unknown, job-not-finished, too-many-endpoints, payload-too-large,
         *     request-timeout, unsupported-media-type, validation-failed, provider-unknown,
         *     provider-not-qualified, budget-exceeded, output-streaming, contract-violation, rate-limited,
         *     too-many-long-polls, unavailable, storage-full, internal.
         */
        Problem: {
            /** @description What happened in this case. */
            detail?: string | null;
            /**
             * @description For `validation-failed`: each offending field, by JSON Pointer
             *     (`pointer`) or query parameter (`parameter`), with `detail`.
             */
            errors?: Record<string, never>[] | null;
            /**
             * Format: int64
             * @description For `validation-failed`: how many violations were left out of
             *     `errors` (it lists at most 100).
             */
            errors_omitted?: number | null;
            /**
             * Format: int32
             * @description The HTTP status.
             */
            status: number;
            /** @description For people, fixed per type. */
            title: string;
            /** @description The stable problem type. */
            type: string;
        };
        /** @description `POST /providers/{name}/qualifications` body. */
        QualifyBody: {
            /** @description The task whose contract the provider must meet. */
            task: string;
        };
        /** @description A ready server's answer. */
        Readiness: {
            database?: null | components["schemas"]["DatabaseReplication"];
            /** @description Always `ready`: a server that is not answers 503 with a problem. */
            status: string;
        };
        /** @description The answer to `POST /jobs/{id}/attempts/{number}/resolve`. */
        ResolveAnswer: components["schemas"]["Job"] | components["schemas"]["ResolvedElsewhere"];
        /** @description `POST /jobs/{id}/attempts/{number}/resolve` body. */
        ResolveBody: {
            /** @description What became of the attempt. */
            outcome: components["schemas"]["Outcome"];
            /**
             * @description The output, for `succeeded`: any JSON value but `null` (an object
             *     for a JSON task, a string for a text task), which must meet the
             *     task's output schema. `null` is refused for either outcome, unlike
             *     leaving it out.
             */
            output?: unknown;
            /** @description Why (1 to 1000 characters); kept in the job's events. */
            reason: string;
        };
        /**
         * @description Where another owner's job stands after an operator resolved one of its
         *     attempts.
         */
        ResolvedElsewhere: {
            /**
             * Format: int32
             * @description The resolved attempt's number.
             */
            attempt: number;
            /** @description That attempt's state now. */
            attempt_state: components["schemas"]["AttemptState"];
            /**
             * Format: uuid
             * @description The job's id.
             */
            job_id: string;
            /** @description Its state now. */
            state: components["schemas"]["JobState"];
            /**
             * Format: int32
             * @description The attempt that won, if one has.
             */
            winning_attempt?: number | null;
        };
        /** @description A caller's trace context, as received. */
        TraceContext: {
            /** @description `00-<trace id>-<parent id>-<flags>`. */
            traceparent: string;
            /** @description Vendors' entries, passed on unchanged. */
            tracestate?: string | null;
        };
        /** @description Tokens an attempt used (or, when `estimated`, may have used). */
        Usage: {
            /**
             * Format: int64
             * @description Of the prompt tokens, those read from the provider's prompt cache
             *     (Anthropic's `cache_read_input_tokens`, OpenAI's `cached_tokens`).
             */
            cache_read_tokens?: number;
            /**
             * Format: int64
             * @description Of the prompt tokens, those written to the provider's prompt cache
             *     (Anthropic's `cache_creation_input_tokens`).
             */
            cache_write_tokens?: number;
            /**
             * Format: int64
             * @description Completion (output) tokens.
             */
            completion_tokens: number;
            /**
             * @description Not reported by the provider: the rendered prompt's tokens and the
             *     provider's `max_output_tokens`, the most it could have charged.
             */
            estimated: boolean;
            /**
             * Format: int64
             * @description The files its output held (images, clips), by which a provider may
             *     bill per output; 0 for an output without files, and then not shown.
             */
            outputs?: number;
            /**
             * Format: int64
             * @description The provider's compute time, in milliseconds, by which a GPU
             *     provider bills (Cog's and Replicate's `metrics.predict_time`); 0 for
             *     a provider that bills by tokens, and then not shown.
             */
            predict_ms?: number;
            /**
             * Format: int64
             * @description Prompt (input) tokens.
             */
            prompt_tokens: number;
        };
        /** @description One group of the report. */
        UsageGroup: components["schemas"]["UsageTotals"] & {
            /** @description The provider, task, or day (`YYYY-MM-DD`). */
            key: string;
        };
        /** @description `GET /usage`. */
        UsageReport: {
            /**
             * Format: date-time
             * @description Attempts created from this time on…
             */
            from: string;
            /** @description What the groups are. */
            group_by: components["schemas"]["GroupBy"];
            /** @description By `group_by`, in key order. */
            groups: components["schemas"]["UsageGroup"][];
            /**
             * Format: date-time
             * @description …and before this one.
             */
            to: string;
            /** @description Every counted attempt. */
            total: components["schemas"]["UsageTotals"];
        };
        /**
         * @description Tokens and cost of some attempts. Amounts are exact decimal strings by
         *     currency; `total = winner + waste`.
         */
        UsageTotals: {
            /**
             * Format: int64
             * @description Attempts counted.
             */
            attempts: number;
            /**
             * Format: int64
             * @description Of their prompt tokens, those read from the provider's prompt cache.
             */
            cache_read_tokens: number;
            /**
             * Format: int64
             * @description Of their prompt tokens, those written to the provider's prompt cache.
             */
            cache_write_tokens: number;
            /**
             * Format: int64
             * @description Their completion tokens.
             */
            completion_tokens: number;
            /**
             * @description Every counted attempt's cost, by currency.
             * @example {
             *       "USD": "0.000131"
             *     }
             */
            cost: {
                [key: string]: string;
            };
            /**
             * Format: int64
             * @description Attempts whose usage is an estimate (never reported by the provider).
             */
            estimated_attempts: number;
            /**
             * Format: int64
             * @description The files of their outputs (images, clips).
             */
            outputs: number;
            /**
             * Format: int64
             * @description Their providers' compute time, in milliseconds (GPU providers'
             *     `predict_time`).
             */
            predict_ms: number;
            /**
             * Format: int64
             * @description Their prompt tokens.
             */
            prompt_tokens: number;
            /**
             * @description The cost of attempts that did not produce their job's result
             *     (superseded, failed after the provider answered, unknown), by currency.
             */
            waste_cost: {
                [key: string]: string;
            };
            /**
             * Format: int64
             * @description The files of their outputs.
             */
            waste_outputs: number;
            /**
             * Format: int64
             * @description Their compute time, in milliseconds.
             */
            waste_predict_ms: number;
            /**
             * Format: int64
             * @description The tokens of those attempts.
             */
            waste_tokens: number;
            /** @description The winning attempts' cost, by currency. */
            winner_cost: {
                [key: string]: string;
            };
        };
        /**
         * @description Why a queued job's pending attempt is not running yet, the first that
         *     applies, for `GET /jobs/{id}`.
         */
        Waiting: {
            /**
             * Format: int64
             * @description Milliseconds until the wait ends, when that is known.
             */
            for_ms?: number | null;
            /**
             * Format: int32
             * @description The limit reached, for the `max` and `per-minute` reasons.
             */
            limit?: number | null;
            /**
             * @description `retry-backoff` (the attempt is not due yet), `provider-paused`
             *     (its provider asked for a pause, or its tokens per minute are
             *     spent), `owner-max-in-flight`, `provider-max-concurrent`,
             *     `provider-requests-per-minute`, or `worker` (due, waiting for a
             *     worker to claim it).
             */
            reason: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    provider_callback: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the job */
                job: string;
                /** @description the attempt's number */
                number: number;
                /** @description the attempt's callback token, as onejob gave it */
                token: string;
            };
            cookie?: never;
        };
        /** @description what the provider says of the request: a Cog or Replicate prediction (`id`, `status`, `output`, `error`, `metrics`) */
        requestBody: {
            content: {
                "application/json": Record<string, never>;
            };
        };
        responses: {
            /** @description received: `received` says what became of it (`settled`, `already-settled`, `not-final`, `job-gone`) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description unauthorized: the token is not this attempt's, or the callback is not signed by the attempt's provider (Replicate's Standard Webhooks signature) */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: the job has no such attempt, or its provider does not call back */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: the body is not JSON */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the provider's signing secret cannot be had; the sender should send it again */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    docs: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description HTML */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/html": unknown;
                };
            };
        };
    };
    healthz: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the process is alive */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
        };
    };
    list_jobs: {
        parameters: {
            query?: {
                /** @description only jobs in this state */
                state?: components["schemas"]["JobState"];
                /** @description only jobs of this task */
                task?: string;
                /** @description 1 to 100, default 20 */
                limit?: number;
                /** @description `next_cursor` of the previous page */
                cursor?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the owner's jobs, newest first */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["JobPage"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad parameter */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    create_job: {
        parameters: {
            query?: never;
            header: {
                /** @description 1 to 255 visible ASCII characters naming this intent; the structured-field form "abc" is the same key as abc. A key is held as long as its job: a finished job (and its key) is kept for its task's retention after its last change (`retention.finished_jobs`, 30 days by default, never under 24 h), then purged; the job's `expires_at` says when, and after it the same key makes a new job */
                "Idempotency-Key": string;
                /** @description `wait=N` (RFC 7240), N from 0 to 30: answer when the job is finished or N seconds have passed, whichever comes first, with the job as it then is (`Preference-Applied: wait=N` says it waited). Declined, and the job answered at once, when the owner holds all its places for long-polls on this server. Other preferences are ignored */
                Prefer?: string | null;
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateJobBody"];
            };
        };
        responses: {
            /** @description a replay: the job this key made, as it is now */
            200: {
                headers: {
                    /** @description true */
                    "Idempotent-Replayed"?: string;
                    /** @description /jobs/{id} */
                    Location?: string;
                    /** @description wait=N, when the request waited */
                    "Preference-Applied"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description created: the job and its pending first attempt (with `Prefer: wait`, the job as it is when it finished or the wait passed) */
            201: {
                headers: {
                    /** @description /jobs/{id} */
                    Location?: string;
                    /** @description wait=N, when the request waited */
                    "Preference-Applied"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description idempotency-key-reused: the key made a job with another task, input, provider or max_cost; or budget-exceeded: the first attempt could cost more than max_cost */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed (malformed JSON, unknown field or task, input breaking the schema, a prompt that cannot be rendered, a bad `Prefer: wait`) or provider-unknown */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    get_job: {
        parameters: {
            query?: {
                /** @description long-poll up to this many seconds (0 to 30) until the job differs from what the client saw, or is finished */
                wait?: number;
            };
            header?: {
                /** @description the ETag the client has */
                "If-None-Match"?: string | null;
            };
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the job with all its attempts */
            200: {
                headers: {
                    /** @description this representation's tag */
                    ETag?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description not modified: the client's ETag is current */
            304: {
                headers: {
                    ETag?: string;
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such job for this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad `wait` */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server; or too-many-long-polls: the owner holds `server.max_long_polls_per_owner` long-polls and event streams open on this server (a read without `wait` is never refused for it) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    erase_job: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description erased: the job, its attempts, events and webhook deliveries are gone; its usage stays in `GET /usage`, and its idempotency key makes a new job */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description job-not-finished: it is queued, running or unknown, or an attempt of it is still pending, running or unknown */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    create_attempt: {
        parameters: {
            query?: never;
            header: {
                /** @description 1 to 255 visible ASCII characters naming this intent; the structured-field form "abc" is the same key as abc */
                "Idempotency-Key": string;
            };
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        /** @description optional: an empty body retries the job's own provider */
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateAttemptBody"];
            };
        };
        responses: {
            /** @description a replay: the attempt this key made on this job */
            200: {
                headers: {
                    /** @description true */
                    "Idempotent-Replayed"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AttemptWithJob"];
                };
            };
            /** @description admitted: a pending attempt */
            201: {
                headers: {
                    /** @description /jobs/{id} */
                    Location?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AttemptWithJob"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description job-finished, attempt-pending, attempt-outcome-unknown (with Retry-After), too-many-attempts-in-flight, attempt-limit-reached, budget-exceeded (its worst-case cost exceeds what is left of the budget), output-streaming (a running attempt's answer streams to the job's output; with Retry-After), or idempotency-key-reused */
            409: {
                headers: {
                    /** @description for attempt-outcome-unknown */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed, provider-unknown, or provider-not-qualified (the detail says why) */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    resolve_attempt: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the job's id */
                id: string;
                /** @description the attempt's number */
                number: number;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ResolveBody"];
            };
        };
        responses: {
            /** @description settled: a succeeded output went through the job's compare-and-swap; the job, or to an operator of another owner where it stands */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ResolveAnswer"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such job and attempt for this key's owner (or, for an operator key, no such unknown attempt of any owner) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description attempt-not-unknown */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed or contract-violation */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    cancel_job: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description canceled (or it was already): pending attempts canceled; running ones are being canceled (`canceling` lists them) or, with the task's `cancel_losers` off, finish and are never applied */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description job-finished: it succeeded */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    job_events: {
        parameters: {
            query?: {
                /** @description resume after this event id (the Last-Event-ID header, when sent, takes precedence) */
                after?: number;
            };
            header?: {
                /** @description resume after this event id, as a reconnecting EventSource sends it */
                "Last-Event-ID"?: number | null;
            };
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description a stream of the job's events (`text/event-stream`): each with `id:` its place in the job's log (1 for the first), `event:` its kind and `data:` its JSON (id, job_id, kind, at, job_state after it, the attempt it concerns with its number, id and provider, and detail); every event after the cursor, then live ones; while the job waits for someone (failed with a new attempt still admissible, or an attempt unknown), `waiting` (the `id` of the item before it; data: the job's `state`, `waiting_for`: `client`, `operator` or `reconciliation`, the `attempt` it is about, and `next`, what may be done), once each time it comes to that; it ends once the job can change no more (succeeded, canceled, or failed with its attempts used up, and no attempt open), when the job is erased, when the server stops and when the key is revoked; a comment every 15 s */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": string;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such job for this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad `after` or `Last-Event-ID` */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server; or too-many-long-polls: the owner holds `server.max_long_polls_per_owner` long-polls and event streams open on this server (a read without `wait` is never refused for it) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    job_file: {
        parameters: {
            query?: never;
            header?: {
                /** @description one byte range (`bytes=0-1023`, `bytes=1024-`, `bytes=-512`) */
                Range?: string | null;
            };
            path: {
                /** @description the job's id */
                id: string;
                /** @description the file's name, as the job's result gives it (`file`) */
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the file, as its provider made it (its `sha256` in the result); its media type in Content-Type */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": number[];
                };
            };
            /** @description the range asked for, with Content-Range */
            206: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": number[];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such job for this owner, or no such file of it */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description range-not-satisfiable: the range is past the file's end */
            416: {
                headers: {
                    /** @description `bytes *\/{size}` */
                    "Content-Range"?: string;
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    job_output: {
        parameters: {
            query?: {
                /** @description resume after this event id (the Last-Event-ID header, when sent, takes precedence) */
                after?: number;
            };
            header?: {
                /** @description resume after this event id, as a reconnecting EventSource sends it */
                "Last-Event-ID"?: number | null;
            };
            path: {
                /** @description the job's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the job's output (`text/event-stream`), each event with `id:` its place in the job's output (1 for the first), a durable cursor that any replica honours. For a streaming task, first the pieces as they are stored: `delta` (data: `attempt`, `text`; a text task's deltas put together are its answer), for a JSON task each followed, when it changed the answer so far, by `partial` (the same `id`; data: `attempt`, `value`, the answer so far parsed as JSON with what is open closed, a key, number or literal not yet whole left out), and `restart` (data: `attempt`: discard the text so far, that attempt's answer follows). While the job waits for someone (failed with a new attempt still admissible, or an attempt unknown), `waiting` (the `id` of the item before it; data: the job's `state`, `waiting_for`: `client`, `operator` or `reconciliation`, the `attempt` it is about, and `next`, what may be done), once each time it comes to that; the stream goes on. Then the end: `result` (data: `attempt`, the winning attempt's number, and `result`, as `GET /jobs/{id}` shows it) when the job succeeded, or `error` (data: the job's `state`, its last `attempt`'s number and that attempt's `error`) when it can change no more without a result (canceled, or failed with its attempts used up); the stream then ends. It also ends when the job is erased, when the server stops and when the key is revoked; a comment every 15 s */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": string;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such job for this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad `after` or `Last-Event-ID` */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server; or too-many-long-polls: the owner holds `server.max_long_polls_per_owner` long-polls and event streams open on this server (a read without `wait` is never refused for it) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    revoke_key: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the key's id, as `onejob keys create` and `onejob keys list` print it */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description revoked: no server accepts the key's token any more */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key, or an owner's admin revoking its owner's operator key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no live key with this id (never made, or revoked already) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    render_metrics: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Prometheus text format */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/plain": unknown;
                };
            };
        };
    };
    openapi_json: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description OpenAPI 3.1 */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
        };
    };
    list_providers: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description every provider with, per task, its qualification state (qualified, failed, stale, never), whether it is the task's default provider (whose jobs run on it whatever its qualification, which guards only failover, fallbacks and hedges), whether a qualification of it is running in the answering process (qualifying), the current contract hash, why it may not be used, and the last report's summary */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an operator route called with a client or admin key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    set_breaker: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the provider */
                name: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["BreakerBody"];
            };
        };
        responses: {
            /** @description the breaker after the change: `open` (until an operator closes it) or `closed` */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an operator route called with a client or admin key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such provider */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: the provider has no breaker, or the body is wrong */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    run_qualification: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the provider */
                name: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["QualifyBody"];
            };
        };
        responses: {
            /** @description the stored qualification with its report, per example */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an operator route called with a client or admin key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such provider */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: no such task */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    readyz: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the database answers and takes writes, migrations are applied, the worker (where one runs) is alive */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Readiness"];
                };
            };
            /** @description unavailable */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    usage_report: {
        parameters: {
            query?: {
                /** @description attempts created from this time on (RFC 3339, or a date: its midnight UTC); default: 30 days before `to` */
                from?: string;
                /** @description attempts created before this time (RFC 3339 or a date); default: now. At most 366 days after `from` */
                to?: string;
                /** @description provider (default), task, or day */
                group_by?: components["schemas"]["GroupBy"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the owner's tokens and cost, total and waste, by group */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["UsageReport"];
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad parameter */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_webhooks: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the owner's endpoints (never their secrets), the oldest first: `{"webhooks": [...]}` */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    create_webhook: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateWebhookBody"];
            };
        };
        responses: {
            /** @description registered: the endpoint with its signing `secret` (`whsec_…`), shown this once */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description too-many-endpoints: the owner has `webhooks.max_endpoints_per_owner` endpoints already */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description payload-too-large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported-media-type: the body is not JSON */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: an unknown event type, or a URL that is not https:// on a public address */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    delete_webhook: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the endpoint's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description deleted, with its deliveries: it hears of nothing more */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such endpoint of this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_deliveries: {
        parameters: {
            query?: {
                /** @description at most this many (1 to 100, default 20), the newest first */
                limit?: number;
            };
            header?: never;
            path: {
                /** @description the endpoint's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description `{"deliveries": [...]}`: each with its `id` (the `webhook-id`), job, type, state (pending, delivered, failed) and every try (time, HTTP status, latency, error) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such endpoint of this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description validation-failed: a bad `limit` */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    rotate_secret: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description the endpoint's id */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description the endpoint with its new `secret`, shown this once; deliveries are signed with both until `previous_secret_until` (24 h) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, never>;
                };
            };
            /** @description header-repeated: two Authorization headers */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unauthorized: no bearer token, or not a live API key */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description forbidden: an admin route called with a client key */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not-found: no such endpoint of this owner */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description request-timeout: the request's body did not arrive within the request timeout */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description rate-limited: over the owner's request rate on this server (each replica has its own) */
            429: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written */
            503: {
                headers: {
                    /** @description seconds to wait */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
}
