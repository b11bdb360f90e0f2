"""What the sync and the asyncio clients share: errors, key stores, the retry
policy and its decisions, the answers' types, and the reading of
Server-Sent Events. Nothing here does I/O."""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import httpx

from .models import Attempt, Job

__all__ = [
    "Added",
    "Awaiting",
    "Created",
    "DerivedKeyStore",
    "ErrorEvent",
    "KeyStore",
    "MemoryKeyStore",
    "NotNow",
    "OnejobError",
    "OutputEvent",
    "Partial",
    "Polled",
    "Restart",
    "Result",
    "RetryPolicy",
    "TextDelta",
    "Waiting",
    "WatchedJob",
]

# The problem types of the 409s that mean "not now": a fallback or retry
# refused for a while, answered as values rather than raised.
NOT_NOW_TYPES = frozenset({"attempt-outcome-unknown", "attempt-pending", "too-many-attempts-in-flight", "output-streaming"})
# The states after which a job changes no more.
TERMINAL_STATES = frozenset({"succeeded", "canceled"})
# How many times a dropped event stream is reconnected.
MAX_RECONNECTS = 5


class OnejobError(Exception):
    """An answer that is not what was asked for, with its problem (RFC 9457).

    `type` is the problem type (such as ``"idempotency-key-reused"``), or
    ``"network-error"`` when no answer came; `status` is 0 then. Each problem
    type onejob documents has a subclass of its own (`IdempotencyKeyReused`,
    `Unavailable`, ...), so ``except`` picks what it handles."""

    type: str
    status: int
    detail: str | None
    job_id: str | None
    problem: dict[str, Any] | None
    retry_after: float | None
    #: The problem type a subclass stands for.
    problem_type: ClassVar[str] = ""

    def __init__(
        self,
        status: int,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        kind = problem.get("type") if problem else None
        self.type = kind if isinstance(kind, str) else ("network-error" if status == 0 else f"http-{status}")
        self.status = status
        detail = problem.get("detail") if problem else None
        self.detail = detail if isinstance(detail, str) else None
        job_id = problem.get("job_id") if problem else None
        self.job_id = job_id if isinstance(job_id, str) else None
        self.problem = problem
        self.retry_after = retry_after
        title = problem.get("title") if problem else None
        if self.detail:
            message = self.detail
        elif isinstance(title, str):
            message = title
        elif status == 0:
            message = f"no answer: {cause}"
        else:
            message = f"HTTP {status}"
        super().__init__(message)
        if cause is not None:
            self.__cause__ = cause


class IdempotencyKeyReused(OnejobError):
    """The key was used for another task, input, provider or `max_cost`: `job_id`
    names the job that holds it. Never retried: the same request cannot pass."""

    problem_type = "idempotency-key-reused"


class JobFinished(OnejobError):
    """A new attempt on a job that succeeded or was canceled (or a cancel of one
    that succeeded). Never retried."""

    problem_type = "job-finished"


class AttemptLimitReached(OnejobError):
    """The job has used its task's `max_attempts`."""

    problem_type = "attempt-limit-reached"


class BudgetExceeded(OnejobError):
    """The attempt's worst-case cost exceeds what is left of the job's budget."""

    problem_type = "budget-exceeded"


class AttemptNotUnknown(OnejobError):
    """Resolving an attempt whose outcome is not unknown."""

    problem_type = "attempt-not-unknown"


class NotFound(OnejobError):
    """No such job for this key's owner (another owner's looks the same)."""

    problem_type = "not-found"


class Unauthorized(OnejobError):
    """No token, or not a live API key."""

    problem_type = "unauthorized"


class Forbidden(OnejobError):
    """The key's role may not do this."""

    problem_type = "forbidden"


class ValidationFailed(OnejobError):
    """The request broke a rule: `problem["errors"]` says where."""

    problem_type = "validation-failed"


class ProviderUnknown(OnejobError):
    """The provider is not configured."""

    problem_type = "provider-unknown"


class ProviderNotQualified(OnejobError):
    """The provider has no passing qualification for the task's contract."""

    problem_type = "provider-not-qualified"


class ContractViolation(OnejobError):
    """A resolved output breaks the task's output schema."""

    problem_type = "contract-violation"


class RateLimited(OnejobError):
    """Over the owner's request rate; raised once the retries ran out."""

    problem_type = "rate-limited"


class TooManyLongPolls(OnejobError):
    """The owner holds all its long-poll places; raised once the retries ran out."""

    problem_type = "too-many-long-polls"


class Unavailable(OnejobError):
    """The server could not serve now; raised once the retries ran out."""

    problem_type = "unavailable"


class StorageFull(OnejobError):
    """The database's storage is full and nothing was written; raised once the
    retries ran out."""

    problem_type = "storage-full"


_BY_TYPE: dict[str, type[OnejobError]] = {
    cls.problem_type: cls
    for cls in (
        IdempotencyKeyReused,
        JobFinished,
        AttemptLimitReached,
        BudgetExceeded,
        AttemptNotUnknown,
        NotFound,
        Unauthorized,
        Forbidden,
        ValidationFailed,
        ProviderUnknown,
        ProviderNotQualified,
        ContractViolation,
        RateLimited,
        TooManyLongPolls,
        Unavailable,
        StorageFull,
    )
}


def error_for(status: int, problem: dict[str, Any] | None, retry_after: float | None) -> OnejobError:
    """The error of an answer: the subclass of its problem type, if any."""
    kind = problem.get("type") if problem else None
    cls = _BY_TYPE.get(kind, OnejobError) if isinstance(kind, str) else OnejobError
    return cls(status, problem, retry_after)


def refusal(response: httpx.Response) -> OnejobError:
    """The error of an answer that refused (its body read)."""
    wait = retry_after_seconds(response.headers.get("retry-after"))
    return error_for(response.status_code, problem_of(response), wait)


def check_event_stream(response: httpx.Response) -> None:
    """Raises unless `response` is an event stream."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        raise OnejobError(response.status_code, None, None, ValueError("the answer is not an event stream"))


#: An event stream's timeouts: the server writes a comment every 15 s, so
#: 40 s without a byte is a connection lost without a word.
STREAM_TIMEOUT = httpx.Timeout(10.0, read=40.0)


def wait_timeout(timeout: httpx.Timeout, wait: int | None) -> httpx.Timeout:
    """`timeout`, with room for the server's wait of `wait` seconds."""
    if not wait:
        return timeout
    read = timeout.read
    return httpx.Timeout(timeout.connect, read=(read or 0.0) + wait, write=timeout.write, pool=timeout.pool)


def problem_of(response: httpx.Response) -> dict[str, Any] | None:
    """The problem+json body of an answer, if it has one."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds of a `Retry-After` header: delay-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, at.timestamp() - time.time())


class KeyStore(Protocol):
    """Where the keys of intents are kept, between retries and restarts.

    `setdefault` keeps `key` for `intent` unless one is kept already, and
    returns the kept one; it must be atomic, as concurrent calls of one
    intent (threads, tasks, processes sharing the store) rely on it to make
    one job."""

    def setdefault(self, intent: str, key: str) -> str: ...

    def delete(self, intent: str) -> None: ...


class MemoryKeyStore:
    """Keys kept for the life of the process."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def setdefault(self, intent: str, key: str) -> str:
        with self._lock:
            return self._keys.setdefault(intent, key)

    def delete(self, intent: str) -> None:
        with self._lock:
            self._keys.pop(intent, None)


class DerivedKeyStore:
    """Keys derived from the intent itself (a name-based UUID under
    `namespace`), kept nowhere: every process that names an intent alike
    makes the same key, across restarts and replicas (a web backend's
    workers, a rerun batch), provided the intent names one intention only,
    such as the id a browser made for one click. `delete` forgets nothing:
    a new intention takes a new intent."""

    def __init__(self, namespace: str) -> None:
        self._namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"onejob:{namespace}")

    def setdefault(self, intent: str, key: str) -> str:
        return str(uuid.uuid5(self._namespace, intent))

    def delete(self, intent: str) -> None:
        return None


def key_for(store: KeyStore, intent: str) -> str:
    """The intent's key, made on its first use and kept."""
    return store.setdefault(intent, str(uuid.uuid4()))


@dataclass(frozen=True)
class RetryPolicy:
    """How requests are retried: `max_tries` in all (the first included);
    the first backoff's ceiling `base_delay`, doubling up to `max_delay`
    (seconds); no retry starts later than `max_elapsed` after the first
    try."""

    max_tries: int = 6
    base_delay: float = 0.25
    max_delay: float = 8.0
    max_elapsed: float = 60.0

    def reconnect_delay(self, failures: int) -> float:
        """The pause before reconnecting a stream after `failures` tries in
        a row that brought nothing (none after a drop that followed events)."""
        return 0.0 if failures == 0 else min(self.max_delay, self.base_delay * 2 ** (failures - 1))

    def delay(self, tries: int, asked: float | None, elapsed: float) -> float | None:
        """How long to wait before try `tries + 1` (full jitter, never sooner
        than the server asked), or None when no try is left."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (tries - 1))
        delay = max(random.uniform(0, ceiling), asked or 0.0)
        if tries >= self.max_tries or elapsed + delay > self.max_elapsed:
            return None
        return delay


def retryable(response: httpx.Response) -> bool:
    """Whether an answer may be retried with the same key: 408, 429 and 5xx,
    unless the server says `x-should-retry: false` (and whatever it says
    `x-should-retry: true` of)."""
    said = response.headers.get("x-should-retry")
    if said == "false":
        return False
    if said == "true":
        return True
    return response.status_code in (408, 429) or response.status_code >= 500


@dataclass(frozen=True)
class Created:
    """What `create_job` got."""

    job: Job
    #: 201 when this intent made the job, 200 when it had made it before.
    status: int
    #: Whether the server answered from a job this intent had already made.
    replayed: bool
    #: Whether the server waited for the job's end (`wait_seconds`).
    waited: bool
    #: The intent's idempotency key.
    key: str
    #: How many times the request was sent.
    tries: int


@dataclass(frozen=True)
class Polled:
    """A job read with its ETag (`get_job(..., etag=...)`): `job` is None
    when it had not changed from the version of the ETag sent."""

    job: Job | None
    etag: str


@dataclass(frozen=True)
class Added:
    """A new attempt, as `fallback` got it."""

    attempt: Attempt
    status: int
    replayed: bool
    key: str


@dataclass(frozen=True)
class NotNow:
    """A new attempt refused for now: `kind` says why, `retry_after` how
    many seconds to wait before asking again, when the server said."""

    kind: Literal["attempt-outcome-unknown", "attempt-pending", "too-many-attempts-in-flight", "output-streaming"]
    retry_after: float | None
    problem: dict[str, Any]


@dataclass(frozen=True)
class Awaiting:
    """What a job waits for when nothing more happens to it on its own:
    ``client``, it failed and may take the user's retry or fallback (or a
    cancel); ``operator``, an attempt's outcome is unknown and its provider
    cannot be asked; ``reconciliation``, onejob asks the provider."""

    state: str
    waiting_for: str
    attempt: int | None
    next: str

    @staticmethod
    def of(data: Mapping[str, Any]) -> Awaiting:
        return Awaiting(
            state=str(data.get("state")),
            waiting_for=str(data.get("waiting_for")),
            attempt=data.get("attempt"),
            next=str(data.get("next", "")),
        )


@dataclass(frozen=True)
class WatchedJob:
    """A job as `watch` yields it, with what it waits for when it waits."""

    job: Job
    awaiting: Awaiting | None = None


@dataclass(frozen=True)
class TextDelta:
    """Text to append to the answer so far."""

    id: str
    attempt: int
    text: str


@dataclass(frozen=True)
class Partial:
    """The answer so far parsed as JSON, what is open closed (a JSON task);
    it follows the `TextDelta` that changed it, with the same `id`."""

    id: str
    attempt: int
    value: Any


@dataclass(frozen=True)
class Restart:
    """Discard the text so far: another attempt's answer follows."""

    id: str
    attempt: int


@dataclass(frozen=True)
class Waiting:
    """Nothing more happens unless someone acts; the stream goes on, since a
    fallback may come."""

    id: str
    awaiting: Awaiting


@dataclass(frozen=True)
class Result:
    """The job's validated result; the stream ends."""

    id: str
    attempt: int
    result: Any


@dataclass(frozen=True)
class ErrorEvent:
    """The job ended without a result; the stream ends."""

    id: str
    state: str
    attempt: int | None
    error: Any


#: One event of a job's output (`stream`), each with `id`, its durable cursor.
OutputEvent = TextDelta | Partial | Restart | Waiting | Result | ErrorEvent


@dataclass
class SseEvent:
    """One Server-Sent Event: its `id`, `event` and parsed `data`."""

    id: str
    kind: str
    data: Any


@dataclass
class SseParser:
    """Reads Server-Sent Events line by line (`feed`), yielding each event
    when its blank line comes."""

    _id: str = ""
    _kind: str = "message"
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> Iterator[SseEvent]:
        line = line.rstrip("\r\n")
        if line == "":
            if self._data:
                text = "\n".join(self._data)
                try:
                    data: Any = json.loads(text)
                except ValueError:
                    data = text
                yield SseEvent(self._id, self._kind, data)
            self._id, self._kind, self._data = "", "message", []
            return
        if line.startswith(":"):
            return  # a comment: keeps the connection open
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self._id = value
        elif name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)


def output_event(event: SseEvent) -> OutputEvent | None:
    """The output event an SSE event of `GET /jobs/{id}/output` is."""
    data: dict[str, Any] = event.data if isinstance(event.data, dict) else {}
    number = data.get("attempt")
    attempt = number if isinstance(number, int) else 0
    if event.kind == "delta":
        return TextDelta(event.id, attempt, str(data.get("text", "")))
    if event.kind == "partial":
        return Partial(event.id, attempt, data.get("value"))
    if event.kind == "restart":
        return Restart(event.id, attempt)
    if event.kind == "waiting":
        return Waiting(event.id, Awaiting.of(data))
    if event.kind == "result":
        return Result(event.id, attempt, data.get("result"))
    if event.kind == "error":
        return ErrorEvent(event.id, str(data.get("state")), number if isinstance(number, int) else None, data.get("error"))
    return None


def is_last(event: SseEvent) -> bool:
    """Whether an output event is the stream's last: the result or the error."""
    return event.kind in ("result", "error")


def changed(last: Job | None, job: Job) -> bool:
    """Whether `job` is a change from the version `last` seen."""
    return last is None or job.updated_at != last.updated_at or job.state != last.state


def is_terminal(job: Job) -> bool:
    """Whether the job changes no more (it succeeded or was canceled)."""
    return str(job.state) in TERMINAL_STATES


def create_body(task: str, input: Any, provider: str | None, max_cost: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"task": task, "input": input}
    if provider is not None:
        body["provider"] = provider
    if max_cost is not None:
        body["max_cost"] = max_cost
    return body


def resolve_body(outcome: str, reason: str, output: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"outcome": outcome, "reason": reason}
    if output is not None:
        body["output"] = output
    return body


def created(response: httpx.Response, key: str, tries: int) -> Created:
    return Created(
        job=Job.model_validate(response.json()),
        status=response.status_code,
        replayed=response.headers.get("idempotent-replayed") == "true",
        waited=response.headers.get("preference-applied", "").startswith("wait="),
        key=key,
        tries=tries,
    )


def added_or_not_now(response: httpx.Response, key: str) -> Added | NotNow:
    """A new attempt's answer: the attempt, or why not now (other 409s raise)."""
    if response.status_code == 409:
        problem = problem_of(response) or {"type": "http-409", "title": "Conflict", "status": 409}
        wait = retry_after_seconds(response.headers.get("retry-after"))
        kind = problem.get("type")
        if kind not in NOT_NOW_TYPES:
            raise error_for(409, problem, wait)
        return NotNow(kind, wait, problem)
    return Added(
        attempt=Attempt.model_validate(response.json()),
        status=response.status_code,
        replayed=response.headers.get("idempotent-replayed") == "true",
        key=key,
    )
