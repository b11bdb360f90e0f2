"""The API's types, generated from onejob's served /openapi.json by
`python scripts/generate_models.py` (datamodel-code-generator). Do not edit:
`python scripts/generate_models.py --check` compares."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel


class AttemptOrigin(StrEnum):
    client = "client"
    policy = "policy"
    hedge = "hedge"


class AttemptState(StrEnum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    unknown = "unknown"
    superseded = "superseded"
    canceled = "canceled"


class BreakerBodyState(StrEnum):
    open = "open"
    closed = "closed"


class Cost(BaseModel):
    amount: Annotated[
        str,
        Field(description="The exact amount, a decimal string.", examples=["0.000123"]),
    ]
    currency: Annotated[str, Field(description="Its currency.")]
    price_version: Annotated[
        str,
        Field(
            description="Which price was used: `sha256:` and 16 hex digits of the price."
        ),
    ]


class CreateAttemptBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    provider: Annotated[
        str | None,
        Field(description="A configured provider; the job's own when left out."),
    ] = None


class CreateJobBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    input: Annotated[
        Any,
        Field(
            description="The task's input: any JSON value, which the task's input schema\nthen checks."
        ),
    ]
    max_cost: Annotated[
        str | None,
        Field(
            description="The most the job's attempts may cost together, a decimal string in\nthe providers' currency (at most 18 decimals). Part of the intent:\nthe same key with another `max_cost` is a conflict.",
            examples=["0.05"],
            pattern="^[0-9]{1,20}(\\.[0-9]{1,18})?$",
        ),
    ] = None
    provider: Annotated[
        str | None,
        Field(description="A configured provider; the task's default when left out."),
    ] = None
    task: Annotated[str, Field(description="A configured task.")]


class CreateWebhookBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    description: Annotated[
        str | None,
        Field(description="For people (at most 500 characters).", max_length=500),
    ] = None
    events: Annotated[
        list[str],
        Field(
            description="What it hears of: `job.succeeded`, `job.failed`, `job.unknown`,\n`job.canceled`, `attempt.unknown`, `attempt.superseded`.",
            min_length=1,
        ),
    ]
    url: Annotated[
        str,
        Field(
            description="Where deliveries are posted: `https://` on a public address (hosts\nin `webhooks.allow_hosts` excepted).",
            max_length=2000,
            min_length=1,
        ),
    ]


class DatabaseReplication(BaseModel):
    commit_waits_for_standby: Annotated[
        bool,
        Field(
            description="Whether a commit returns only once a synchronous standby has it, so\nthat a failover to that standby loses no acknowledged job. Also the\ngauge `onejob_database_commit_waits_for_standby`."
        ),
    ]
    standbys: Annotated[
        int, Field(description="Standbys streaming from the server when last read.")
    ]
    synchronous_commit: Annotated[
        str, Field(description="The server's `synchronous_commit`.")
    ]
    synchronous_standby_names: Annotated[
        str,
        Field(description="The server's `synchronous_standby_names` (empty: none)."),
    ]


class GroupBy(StrEnum):
    provider = "provider"
    task = "task"
    day = "day"


class JobCost(BaseModel):
    currency: Annotated[str, Field(description="The currency of every amount.")]
    estimated: Annotated[
        bool,
        Field(
            description="Whether any part is an estimate (an attempt whose usage the provider\nnever reported)."
        ),
    ]
    total: Annotated[
        str,
        Field(
            description="Every attempt's cost: `winner + waste`. A decimal string.",
            examples=["0.000131"],
        ),
    ]
    waste: Annotated[
        str,
        Field(
            description="The cost of the attempts that did not produce the result.",
            examples=["0.000066"],
        ),
    ]
    winner: Annotated[
        str,
        Field(
            description="The winning attempt's cost (`0` until one wins).",
            examples=["0.000065"],
        ),
    ]


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    unknown = "unknown"
    failed = "failed"
    succeeded = "succeeded"
    canceled = "canceled"


class JobSummary(BaseModel):
    created_at: Annotated[
        AwareDatetime, Field(description="When the job was accepted.")
    ]
    id: Annotated[UUID, Field(description="The job's id.")]
    idempotency_key: Annotated[
        str, Field(description="The key the job was created with.")
    ]
    provider: Annotated[str, Field(description="The primary provider.")]
    state: Annotated[JobState, Field(description="The derived, stored state.")]
    task: Annotated[str, Field(description="The task's name.")]
    updated_at: Annotated[
        AwareDatetime, Field(description="When its state last changed.")
    ]
    winning_attempt: Annotated[
        int | None,
        Field(description="The number of the attempt that won, once one has."),
    ] = None


class Outcome(StrEnum):
    succeeded = "succeeded"
    failed = "failed"


class Problem(BaseModel):
    detail: Annotated[str | None, Field(description="What happened in this case.")] = (
        None
    )
    errors: Annotated[
        list[dict[str, Any]] | None,
        Field(
            description="For `validation-failed`: each offending field, by JSON Pointer\n(`pointer`) or query parameter (`parameter`), with `detail`."
        ),
    ] = None
    errors_omitted: Annotated[
        int | None,
        Field(
            description="For `validation-failed`: how many violations were left out of\n`errors` (it lists at most 100).",
            ge=0,
        ),
    ] = None
    status: Annotated[int, Field(description="The HTTP status.", ge=0)]
    title: Annotated[str, Field(description="For people, fixed per type.")]
    type: Annotated[str, Field(description="The stable problem type.")]


class QualifyBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    task: Annotated[
        str, Field(description="The task whose contract the provider must meet.")
    ]


class Readiness(BaseModel):
    database: DatabaseReplication | None = None
    status: Annotated[
        str,
        Field(
            description="Always `ready`: a server that is not answers 503 with a problem."
        ),
    ]


class ResolveBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    outcome: Annotated[Outcome, Field(description="What became of the attempt.")]
    output: Annotated[
        Any | None,
        Field(
            description="The output, for `succeeded`: any JSON value but `null` (an object\nfor a JSON task, a string for a text task), which must meet the\ntask's output schema. `null` is refused for either outcome, unlike\nleaving it out."
        ),
    ] = None
    reason: Annotated[
        str,
        Field(
            description="Why (1 to 1000 characters); kept in the job's events.",
            max_length=1000,
            min_length=1,
        ),
    ]


class ResolvedElsewhere(BaseModel):
    attempt: Annotated[int, Field(description="The resolved attempt's number.")]
    attempt_state: Annotated[
        AttemptState, Field(description="That attempt's state now.")
    ]
    job_id: Annotated[UUID, Field(description="The job's id.")]
    state: Annotated[JobState, Field(description="Its state now.")]
    winning_attempt: Annotated[
        int | None, Field(description="The attempt that won, if one has.")
    ] = None


class TraceContext(BaseModel):
    traceparent: Annotated[
        str, Field(description="`00-<trace id>-<parent id>-<flags>`.")
    ]
    tracestate: Annotated[
        str | None, Field(description="Vendors' entries, passed on unchanged.")
    ] = None


class Usage(BaseModel):
    cache_read_tokens: Annotated[
        int | None,
        Field(
            description="Of the prompt tokens, those read from the provider's prompt cache\n(Anthropic's `cache_read_input_tokens`, OpenAI's `cached_tokens`)."
        ),
    ] = None
    cache_write_tokens: Annotated[
        int | None,
        Field(
            description="Of the prompt tokens, those written to the provider's prompt cache\n(Anthropic's `cache_creation_input_tokens`)."
        ),
    ] = None
    completion_tokens: Annotated[int, Field(description="Completion (output) tokens.")]
    estimated: Annotated[
        bool,
        Field(
            description="Not reported by the provider: the rendered prompt's tokens and the\nprovider's `max_output_tokens`, the most it could have charged."
        ),
    ]
    outputs: Annotated[
        int | None,
        Field(
            description="The files its output held (images, clips), by which a provider may\nbill per output; 0 for an output without files, and then not shown."
        ),
    ] = None
    predict_ms: Annotated[
        int | None,
        Field(
            description="The provider's compute time, in milliseconds, by which a GPU\nprovider bills (Cog's and Replicate's `metrics.predict_time`); 0 for\na provider that bills by tokens, and then not shown."
        ),
    ] = None
    prompt_tokens: Annotated[int, Field(description="Prompt (input) tokens.")]


class UsageTotals(BaseModel):
    attempts: Annotated[int, Field(description="Attempts counted.", ge=0)]
    cache_read_tokens: Annotated[
        int,
        Field(
            description="Of their prompt tokens, those read from the provider's prompt cache."
        ),
    ]
    cache_write_tokens: Annotated[
        int,
        Field(
            description="Of their prompt tokens, those written to the provider's prompt cache."
        ),
    ]
    completion_tokens: Annotated[int, Field(description="Their completion tokens.")]
    cost: Annotated[
        dict[str, str],
        Field(
            description="Every counted attempt's cost, by currency.",
            examples=[{"USD": "0.000131"}],
        ),
    ]
    estimated_attempts: Annotated[
        int,
        Field(
            description="Attempts whose usage is an estimate (never reported by the provider).",
            ge=0,
        ),
    ]
    outputs: Annotated[
        int, Field(description="The files of their outputs (images, clips).")
    ]
    predict_ms: Annotated[
        int,
        Field(
            description="Their providers' compute time, in milliseconds (GPU providers'\n`predict_time`)."
        ),
    ]
    prompt_tokens: Annotated[int, Field(description="Their prompt tokens.")]
    waste_cost: Annotated[
        dict[str, str],
        Field(
            description="The cost of attempts that did not produce their job's result\n(superseded, failed after the provider answered, unknown), by currency."
        ),
    ]
    waste_outputs: Annotated[int, Field(description="The files of their outputs.")]
    waste_predict_ms: Annotated[
        int, Field(description="Their compute time, in milliseconds.")
    ]
    waste_tokens: Annotated[int, Field(description="The tokens of those attempts.")]
    winner_cost: Annotated[
        dict[str, str], Field(description="The winning attempts' cost, by currency.")
    ]


class Waiting(BaseModel):
    for_ms: Annotated[
        int | None,
        Field(
            description="Milliseconds until the wait ends, when that is known.", ge=0
        ),
    ] = None
    limit: Annotated[
        int | None,
        Field(
            description="The limit reached, for the `max` and `per-minute` reasons.",
            ge=0,
        ),
    ] = None
    reason: Annotated[
        str,
        Field(
            description="`retry-backoff` (the attempt is not due yet), `provider-paused`\n(its provider asked for a pause, or its tokens per minute are\nspent), `owner-max-in-flight`, `provider-max-concurrent`,\n`provider-requests-per-minute`, or `worker` (due, waiting for a\nworker to claim it)."
        ),
    ]


class Attempt(BaseModel):
    cost: Cost | None = None
    created_at: Annotated[AwareDatetime, Field(description="When it was admitted.")]
    error: Annotated[
        dict[str, Any] | None,
        Field(
            description="What went wrong, for failed and unknown attempts: `{type, message, detail}`."
        ),
    ] = None
    finished_at: Annotated[
        AwareDatetime | None,
        Field(description="When it reached a final or unknown state."),
    ] = None
    id: Annotated[
        UUID,
        Field(
            description="The id sent to the provider as its request and idempotency id (I6)."
        ),
    ]
    idempotency_key: Annotated[
        str | None,
        Field(
            description="The key of the request that added it; none for a job's first attempt."
        ),
    ] = None
    lease_until: Annotated[
        AwareDatetime | None, Field(description="Until when that worker's claim holds.")
    ] = None
    not_before: Annotated[
        AwareDatetime, Field(description="Not claimed before this (retry backoff).")
    ]
    number: Annotated[int, Field(description="1 for the first attempt, then 2, 3, …")]
    origin: Annotated[AttemptOrigin, Field(description="Who started it.")]
    output: Annotated[
        Any | None,
        Field(
            description="The output, for succeeded and superseded attempts: an object, or\nfor a prose task a string."
        ),
    ] = None
    provider: Annotated[str, Field(description="The provider it runs on.")]
    provider_request_id: Annotated[
        str | None,
        Field(
            description="The provider's own id of this attempt's request, when it gave one:\na background response's id (`resp_…`), by which it is asked about\nand canceled. Kept as soon as the provider answers with it."
        ),
    ] = None
    started_at: Annotated[
        AwareDatetime | None, Field(description="When a worker claimed it.")
    ] = None
    state: Annotated[
        AttemptState, Field(description="Where it is in its state machine.")
    ]
    trace: TraceContext | None = None
    unapplied_output: Annotated[
        dict[str, Any] | None,
        Field(
            description="An output the provider gave that did not become this attempt's\noutput, kept for audit and never validated: one that broke the\ntask's contract, or one that came after the attempt was settled.\n`{why, received_at, output}`, or past 64 KiB `{why, received_at,\ntruncated: true, text}` with the output's first 64 KiB of JSON text."
        ),
    ] = None
    usage: Usage | None = None
    worker: Annotated[
        str | None, Field(description="The worker holding it while running.")
    ] = None


class AttemptWithJob(Attempt):
    job_id: Annotated[UUID, Field(description="The job.")]


class BreakerBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reason: Annotated[
        str,
        Field(
            description="Why, for the providers' listing and the log.",
            max_length=500,
            min_length=1,
        ),
    ]
    state: Annotated[
        BreakerBodyState,
        Field(description="`open` (until closed by hand) or `closed`."),
    ]


class Job(BaseModel):
    attempts: Annotated[list[Attempt], Field(description="Every attempt, by number.")]
    canceling: Annotated[
        list[int],
        Field(
            description="The numbers of a canceled job's attempts that are still `running`\nand being canceled: their calls are aborted (the task's\n`cancel_losers`) and each ends `canceled` as soon as its worker\nhears. Empty otherwise."
        ),
    ]
    cost: JobCost | None = None
    created_at: Annotated[
        AwareDatetime, Field(description="When the job was accepted.")
    ]
    expires_at: Annotated[
        AwareDatetime | None,
        Field(
            description="When this job, finished and with no attempt open, will be purged and\nits idempotency key freed (its last change plus its task's\nretention); `null` while it is not finished, since such a job is\nnever purged."
        ),
    ] = None
    fingerprint: Annotated[
        str,
        Field(
            description="What the intent was, for replay checks: `sha256:<hex>`.",
            examples=["sha256:7e6ae513…"],
        ),
    ]
    id: Annotated[UUID, Field(description="The job's id.")]
    idempotency_key: Annotated[
        str, Field(description="The key the job was created with.")
    ]
    input: Annotated[dict[str, Any], Field(description="The task's input, as sent.")]
    max_cost: Annotated[
        str | None,
        Field(
            description="The most its attempts may cost together, as the create request set\nit (the task's `max_cost` may be lower): a decimal string.",
            examples=["0.05"],
        ),
    ] = None
    provider: Annotated[str, Field(description="The primary provider.")]
    result: Annotated[
        Any | None,
        Field(
            description="The winner's output: an object, or for a task whose output schema\nis a string schema (prose), a string."
        ),
    ] = None
    state: Annotated[JobState, Field(description="The derived, stored state.")]
    task: Annotated[str, Field(description="The task's name.")]
    updated_at: Annotated[
        AwareDatetime, Field(description="When its state last changed.")
    ]
    waiting: Waiting | None = None
    winning_attempt: Annotated[
        int | None,
        Field(description="The number of the attempt that won, once one has."),
    ] = None


class JobPage(BaseModel):
    jobs: Annotated[list[JobSummary], Field(description="Newest first.")]
    next_cursor: Annotated[
        str | None,
        Field(description="Pass as `cursor` for the next page; null on the last."),
    ] = None


class ResolveAnswer(RootModel[Job | ResolvedElsewhere]):
    root: Annotated[
        Job | ResolvedElsewhere,
        Field(description="The answer to `POST /jobs/{id}/attempts/{number}/resolve`."),
    ]


class UsageGroup(UsageTotals):
    key: Annotated[str, Field(description="The provider, task, or day (`YYYY-MM-DD`).")]


class UsageReport(BaseModel):
    from_: Annotated[
        AwareDatetime,
        Field(alias="from", description="Attempts created from this time on…"),
    ]
    group_by: Annotated[GroupBy, Field(description="What the groups are.")]
    groups: Annotated[
        list[UsageGroup], Field(description="By `group_by`, in key order.")
    ]
    to: Annotated[AwareDatetime, Field(description="…and before this one.")]
    total: Annotated[UsageTotals, Field(description="Every counted attempt.")]
