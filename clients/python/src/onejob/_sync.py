"""The client for threads: `OnejobClient`. `AsyncOnejobClient` (in `_async`)
has the same methods for asyncio; what they share is in `_common`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, overload
from urllib.parse import quote

import httpx

from ._common import (
    MAX_RECONNECTS,
    Added,
    Awaiting,
    Created,
    KeyStore,
    MemoryKeyStore,
    NotNow,
    OnejobError,
    OutputEvent,
    Polled,
    RetryPolicy,
    SseEvent,
    SseParser,
    WatchedJob,
    added_or_not_now,
    changed,
    check_event_stream,
    create_body,
    created,
    is_last,
    is_terminal,
    key_for,
    output_event,
    refusal,
    resolve_body,
    retryable,
    STREAM_TIMEOUT,
    wait_timeout,
)
from .models import Job


class OnejobClient:
    """A onejob client for threads (safe to share between them).

    Every request that makes something carries an idempotency key made once
    per intent and kept in `key_store`, so that however often it is sent
    (retries, concurrent calls, a process that restarts with a shared
    store) the intent makes one job or one attempt. Transport errors, 408,
    429 and 5xx are retried with full-jitter backoff, never sooner than the
    server's `Retry-After`, always with the same key."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        key_store: KeyStore | None = None,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._keys: KeyStore = key_store if key_store is not None else MemoryKeyStore()
        self._retry = retry or RetryPolicy()
        self._http = http_client or httpx.Client(timeout=timeout)
        self._owns_http = http_client is None

    def close(self) -> None:
        """Closes the HTTP client, unless it was given."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> OnejobClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def key_for(self, intent: str) -> str:
        """The key of `intent`, made on its first use and kept."""
        return key_for(self._keys, intent)

    def forget_intent(self, intent: str) -> None:
        """Forgets an intent's key: its next `create_job` is a new intent."""
        self._keys.delete(f"create:{intent}")

    def create_job(
        self,
        task: str,
        input: Any,
        *,
        intent: str | None = None,
        provider: str | None = None,
        max_cost: str | None = None,
        wait_seconds: int | None = None,
    ) -> Created:
        """Creates a job, once per intent: the intent's key is made on its
        first call and reused by every later call and retry of it. Without
        an `intent`, the call is an intent of its own. With `wait_seconds`
        (1 to 30) the server answers when the job is finished or that time
        has passed; `waited` says whether it waited."""
        # Without an intent, a key of its own, kept only by this call's retries.
        key = self.key_for(f"create:{intent}") if intent is not None else str(uuid.uuid4())
        headers = {"prefer": f"wait={wait_seconds}"} if wait_seconds else {}
        response, tries = self._send(
            "POST",
            "/jobs",
            body=create_body(task, input, provider, max_cost),
            key=key,
            headers=headers,
            timeout=wait_timeout(self._http.timeout, wait_seconds),
        )
        return created(response, key, tries)

    @overload
    def get_job(self, job_id: str, *, wait: int | None = None, etag: None = None) -> Job: ...

    @overload
    def get_job(self, job_id: str, *, wait: int | None = None, etag: str) -> Polled: ...

    def get_job(self, job_id: str, *, wait: int | None = None, etag: str | None = None) -> Job | Polled:
        """Reads a job. With `wait` (seconds, up to 30) the server answers
        when the job differs from what was last seen, or is finished, or the
        time has passed. Pass `etag` (the one last seen, or ``""``) to get a
        `Polled`: the job and its ETag, or no job when it is unchanged."""
        path = _job_path(job_id) + (f"?wait={wait}" if wait else "")
        headers = {"if-none-match": etag} if etag else {}
        response, _ = self._send("GET", path, headers=headers, accept=(304,), timeout=wait_timeout(self._http.timeout, wait))
        if etag is None:
            return Job.model_validate(response.json())
        if response.status_code == 304:
            return Polled(None, etag)
        return Polled(Job.model_validate(response.json()), response.headers.get("etag", ""))

    def fallback(self, job_id: str, provider: str | None = None, *, intent: str | None = None) -> Added | NotNow:
        """Adds an attempt on `provider` (a retry on the job's own, or a
        fallback), once per intent: by default the intent is this job and
        provider, so a double click adds one attempt. The refusals that
        mean "not now" are returned as `NotNow`, with how long to wait."""
        default = f"{job_id}:{provider or ''}"
        key = self.key_for(f"attempt:{intent if intent is not None else default}")
        body = {} if provider is None else {"provider": provider}
        response, _ = self._send("POST", f"{_job_path(job_id)}/attempts", body=body, key=key, accept=(409,))
        return added_or_not_now(response, key)

    def cancel(self, job_id: str) -> Job:
        """Cancels a job; its running calls are stopped where they can be."""
        response, _ = self._send("POST", f"{_job_path(job_id)}/cancel")
        return Job.model_validate(response.json())

    def resolve(self, job_id: str, attempt: int, *, outcome: str, reason: str, output: Any = None) -> dict[str, Any]:
        """Resolves an attempt whose outcome is unknown (`outcome` is
        ``"succeeded"``, with its `output`, or ``"failed"``): the job, or
        what an operator of another owner may see of it."""
        body = resolve_body(outcome, reason, output)
        response, _ = self._send("POST", f"{_job_path(job_id)}/attempts/{attempt}/resolve", body=body)
        answer: dict[str, Any] = response.json()
        return answer

    def watch(self, job_id: str, *, stream: bool = True) -> Iterator[WatchedJob]:
        """The job as it changes, from its event stream (or long-polls where
        a stream cannot be had), until it succeeded or was canceled. When the
        job waits for someone, the job again with `awaiting`; the watch goes
        on, since a fallback may come."""
        first = self.get_job(job_id, etag="")
        last = first.job
        assert last is not None
        etag = first.etag
        yield WatchedJob(last)
        if is_terminal(last):
            return
        if stream:
            for event in self._events(job_id):
                if event.kind == "waiting":
                    yield WatchedJob(last, Awaiting.of(event.data))
                    continue
                polled = self.get_job(job_id, etag="")
                if polled.job is not None and changed(last, polled.job):
                    last, etag = polled.job, polled.etag
                    yield WatchedJob(last)
                    if is_terminal(last):
                        return
        while True:
            polled = self.get_job(job_id, wait=25, etag=etag)
            if polled.job is not None and changed(last, polled.job):
                last, etag = polled.job, polled.etag
                yield WatchedJob(last)
                if is_terminal(last):
                    return

    def stream(self, job_id: str, *, after: str | None = None) -> Iterator[OutputEvent]:
        """The job's output as it comes: `TextDelta`s to append (each
        followed by the `Partial` answer it changed, for a JSON task), a
        `Restart` when another attempt's answer replaces the text so far, a
        `Waiting` when the job waits for someone, then the `Result` or the
        `ErrorEvent`, after which it ends. A dropped connection is resumed
        after the last event seen, so nothing comes twice or goes missing;
        pass the last `id` shown as `after` to go on from there."""
        for event in self._sse(f"{_job_path(job_id)}/output", after, until_last=True):
            output = output_event(event)
            if output is not None:
                yield output

    def _sse(self, path: str, after: str | None, *, until_last: bool) -> Iterator[SseEvent]:
        """Server-Sent Events from `path`, from after `after`. A connection
        that drops is resumed after the last event seen (`Last-Event-ID`);
        with `until_last`, so is one that ends before a `result` or an
        `error` event, after which the stream ends. Past `MAX_RECONNECTS`
        tries in a row that brought no event, a network error is raised."""
        last_id = after
        failures = 0
        while True:
            headers = {**self._headers, "accept": "text/event-stream"}
            if last_id:
                headers["last-event-id"] = last_id
            progressed = False
            try:
                with self._http.stream("GET", self._base + path, headers=headers, timeout=STREAM_TIMEOUT) as response:
                    if response.status_code != 200:
                        response.read()
                        raise refusal(response)
                    check_event_stream(response)
                    parser = SseParser()
                    for line in response.iter_lines():
                        for event in parser.feed(line):
                            last_id, progressed = event.id or last_id, True
                            yield event
                            if until_last and is_last(event):
                                return
                if not until_last:
                    return
                cause: BaseException = ConnectionError("the stream ended before its last event")
            except httpx.TransportError as error:
                cause = error
            failures = 0 if progressed else failures + 1
            if failures >= MAX_RECONNECTS:
                raise OnejobError(0, None, None, cause)
            time.sleep(self._retry.reconnect_delay(failures))

    def _events(self, job_id: str) -> Iterator[SseEvent]:
        """The job's event stream, until it ends; nothing more once it cannot
        be had (refused, or lost again and again): the watch then long-polls,
        whose answers say what is wrong, if anything is."""
        try:
            yield from self._sse(f"{_job_path(job_id)}/events", None, until_last=False)
        except OnejobError:
            return

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        accept: tuple[int, ...] = (),
        timeout: httpx.Timeout | None = None,
    ) -> tuple[httpx.Response, int]:
        """Sends a request, retrying what is safe to retry with the same key."""
        started = time.monotonic()
        sent = {**self._headers, **(headers or {})}
        if key is not None:
            sent["idempotency-key"] = key
        tries = 0
        while True:
            tries += 1
            wait: float | None = None
            try:
                response = self._http.request(
                    method, self._base + path, json=body, headers=sent, timeout=timeout or self._http.timeout
                )
                if response.is_success or response.status_code in accept:
                    return response, tries
                failure = refusal(response)
                wait = failure.retry_after
                if not retryable(response):
                    raise failure
            except httpx.TransportError as error:
                failure = OnejobError(0, None, None, error)
            delay = self._retry.delay(tries, wait, time.monotonic() - started)
            if delay is None:
                raise failure
            time.sleep(delay)


def _job_path(job_id: str) -> str:
    return f"/jobs/{quote(job_id, safe='')}"
