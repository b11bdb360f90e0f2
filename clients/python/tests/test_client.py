"""The clients against a real `onejob serve` with its built-in simulator, on
SQLite and on Postgres; every test runs with the sync client and with the
asyncio one (`conftest.Api`). Lost answers are a real TCP proxy in front
of the server (`proxy.CuttingProxy`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from conftest import Api, StartServer
from proxy import CuttingProxy, Request, overloaded
from server import Server

from onejob import (
    Added,
    AsyncOnejobClient,
    ErrorEvent,
    IdempotencyKeyReused,
    JobFinished,
    MemoryKeyStore,
    NotFound,
    NotNow,
    OnejobClient,
    Partial,
    Result,
    TextDelta,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)

Connect = Callable[..., Api]


def summarize(text: str) -> dict[str, Any]:
    return {"text": text}


class CountingKeyStore(MemoryKeyStore):
    """A memory key store that counts the keys asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def setdefault(self, intent: str, key: str) -> str:
        self.calls += 1
        return super().setdefault(intent, key)


def job_count(server: Server) -> int:
    page = httpx.get(f"{server.url}/jobs?limit=100", headers={"authorization": f"Bearer {server.token}"}).json()
    return len(page["jobs"])


def test_fifty_concurrent_creates_of_one_intent_from_threads_or_tasks_make_one_job(server: Server, client_kind: str) -> None:
    if client_kind == "sync":
        with OnejobClient(server.url, server.token) as client, ThreadPoolExecutor(50) as pool:
            calls = [pool.submit(client.create_job, "summarize", summarize("once"), intent="click-1") for _ in range(50)]
            created = [call.result() for call in calls]
    else:

        async def fifty() -> list[Any]:
            async with AsyncOnejobClient(server.url, server.token) as client:
                calls = [client.create_job("summarize", summarize("once"), intent="click-1") for _ in range(50)]
                return list(await asyncio.gather(*calls))

        created = asyncio.run(fifty())
    assert len({c.job.id for c in created}) == 1, "one job"
    assert len({c.key for c in created}) == 1, "one key"
    assert sum(1 for c in created if c.status == 201) == 1, "made once, replayed 49 times"
    assert job_count(server) == 1


def test_answers_cut_mid_answer_are_retried_with_one_key_and_make_one_job(server: Server, connect: Connect) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    # The first three creates are cut after 40 bytes of their answer: the
    # server made the job, the client saw a connection lost.
    proxy = CuttingProxy(port, lambda request, seen: 40 if request.method == "POST" and seen < 3 else None)
    kept = CountingKeyStore()
    try:
        api = connect(proxy.url, server.token, key_store=kept)
        created = api.create_job("summarize", summarize("cut three times"))
    finally:
        proxy.close()
    assert kept.calls == 0, "a call without an intent keeps no key"
    posts = [r for r in proxy.requests if r.method == "POST"]
    assert len(posts) == 4, [r.path for r in proxy.requests]
    assert {r.headers["idempotency-key"] for r in posts} == {created.key}, "every try carried the intent's key"
    assert created.tries == 4
    assert created.replayed and created.status == 200, "the fourth try found the job the first made"
    assert job_count(server) == 1


def test_a_key_reused_with_another_payload_is_not_retried_and_names_the_job(server: Server, connect: Connect) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port)
    try:
        api = connect(proxy.url, server.token)
        first = api.create_job("summarize", summarize("the first"), intent="twice")
        with pytest.raises(IdempotencyKeyReused) as raised:
            api.create_job("summarize", summarize("another"), intent="twice")
    finally:
        proxy.close()
    assert raised.value.status == 409
    assert raised.value.job_id == str(first.job.id)
    assert len([r for r in proxy.requests if r.method == "POST"]) == 2, "the 409 was sent once"
    answer = httpx.post(
        f"{server.url}/jobs",
        headers={"authorization": f"Bearer {server.token}", "idempotency-key": first.key},
        json={"task": "summarize", "input": summarize("another")},
    )
    assert answer.headers.get("x-should-retry") == "false"


def test_503_is_retried_no_sooner_than_its_retry_after_with_the_same_key(server: Server, connect: Connect) -> None:
    # The proxy answers the first try itself, as an overloaded gateway would.
    port = int(server.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, answer=lambda request, seen: overloaded("1") if seen == 0 else None)
    try:
        api = connect(proxy.url, server.token)
        started = time.monotonic()
        created = api.create_job("summarize", summarize("after a 503"))
        took = time.monotonic() - started
    finally:
        proxy.close()
    assert created.tries == 2 and created.status == 201
    assert took >= 1.0, f"waited {took:.2f} s, under the Retry-After of 1 s"
    assert {r.headers["idempotency-key"] for r in proxy.requests} == {created.key}


def test_refusals_come_as_typed_errors(server: Server, connect: Connect) -> None:
    api = connect(server.url, server.token)
    with pytest.raises(NotFound):
        api.get_job("0190c5e0-0000-7000-8000-000000000000")
    with pytest.raises(ValidationFailed) as invalid:
        api.create_job("no-such-task", {})
    assert invalid.value.problem and invalid.value.problem["errors"]
    with pytest.raises(Unauthorized):
        connect(server.url, "oj_" + "0" * 64).get_job("0190c5e0-0000-7000-8000-000000000000")


def test_a_server_that_stays_unavailable_ends_in_a_typed_error_after_the_tries(server: Server, connect: Connect) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, answer=lambda request, seen: overloaded("0"))
    try:
        with pytest.raises(Unavailable):
            connect(proxy.url, server.token).create_job("summarize", summarize("never"))
    finally:
        proxy.close()
    keys = [r.headers["idempotency-key"] for r in proxy.requests]
    assert len(keys) == 6 and len(set(keys)) == 1, keys


def test_a_create_that_waits_comes_back_finished_and_a_poll_sees_no_change(server: Server, connect: Connect) -> None:
    api = connect(server.url, server.token)
    created = api.create_job("summarize", summarize("fast"), wait_seconds=10)
    assert created.waited and str(created.job.state) == "succeeded", created.job.state
    first = api.poll(str(created.job.id), 0, "")
    assert first.job is not None and first.etag
    again = api.poll(str(created.job.id), 1, first.etag)
    assert again.job is None and again.etag == first.etag, "unchanged: 304"


def test_watch_sees_an_unknown_attempt_and_a_fallback_is_told_to_wait_meanwhile(server: Server, connect: Connect) -> None:
    api = connect(server.url, server.token)
    created = api.create_job("summarize", summarize("never answered"), provider="sim-hang")
    job_id = str(created.job.id)
    seen = api.watch_until(job_id, lambda w: str(w.job.state) == "unknown")
    assert str(seen[-1].job.attempts[0].state) == "unknown"
    refused = api.fallback(job_id, "sim-fast")
    assert isinstance(refused, NotNow) and refused.kind == "attempt-outcome-unknown"
    assert refused.retry_after and refused.retry_after > 0
    reconciled = api.watch_until(job_id, lambda w: str(w.job.attempts[0].state) != "unknown")
    assert str(reconciled[-1].job.attempts[0].state) == "failed", "the provider's lookup said it failed"


@pytest.mark.parametrize("refusal", ["cut", "503"])
def test_watch_long_polls_where_the_event_stream_cannot_be_had(server: Server, connect: Connect, refusal: str) -> None:
    port = int(server.url.rsplit(":", 1)[1])

    def events(request: Request) -> bool:
        return request.path.endswith("/events")

    proxy = CuttingProxy(
        port,
        cut=lambda request, seen: 0 if refusal == "cut" and events(request) else None,
        answer=lambda request, seen: overloaded("0") if refusal == "503" and events(request) else None,
    )
    try:
        api = connect(proxy.url, server.token)
        created = api.create_job("summarize", summarize("followed by long-polls"), provider="sim-slow")
        seen = api.watch_until(str(created.job.id), lambda w: str(w.job.state) == "succeeded")
    finally:
        proxy.close()
    assert str(seen[-1].job.state) == "succeeded"
    assert any(r.path.endswith("/events") for r in proxy.requests), "the stream was tried"
    assert any("wait=25" in r.path for r in proxy.requests), "then long-polls"


def test_a_double_clicked_fallback_adds_one_attempt_and_a_finished_job_takes_none(server: Server, connect: Connect) -> None:
    api = connect(server.url, server.token)
    created = api.create_job("summarize", summarize("failing"), provider="sim-bad-json")
    job_id = str(created.job.id)
    api.watch_until(job_id, lambda w: w.awaiting is not None or str(w.job.state) == "failed")
    first = api.fallback(job_id, "sim-fast")
    second = api.fallback(job_id, "sim-fast")
    assert isinstance(first, Added) and isinstance(second, Added)
    assert first.attempt.id == second.attempt.id and second.replayed
    api.watch_until(job_id, lambda w: str(w.job.state) == "succeeded")
    with pytest.raises(JobFinished):
        api.fallback(job_id, "sim-fast", intent="after the end")


def test_a_canceled_job_is_canceled_and_a_cancel_of_a_succeeded_one_is_refused(server: Server, connect: Connect) -> None:
    api = connect(server.url, server.token)
    running = api.create_job("summarize", summarize("slow"), provider="sim-slow")
    canceled = api.cancel(str(running.job.id))
    assert str(canceled.state) == "canceled"
    done = api.create_job("summarize", summarize("fast"), wait_seconds=10)
    assert str(done.job.state) == "succeeded"
    with pytest.raises(JobFinished):
        api.cancel(str(done.job.id))


def _streaming(text: str) -> str:
    return text.replace("[tasks.summarize]\n", "[tasks.summarize]\nstream = true\n", 1).replace(
        "[providers.sim-fast]\n", "[providers.sim-fast]\ntokens_per_second = 40\n", 1
    )


def test_a_stream_cut_mid_answer_resumes_with_nothing_twice_or_missing(start: StartServer, connect: Connect) -> None:
    server = start(_streaming)
    port = int(server.url.rsplit(":", 1)[1])
    # The first two connections to the output are cut after 700 bytes.
    cuts = {"left": 2}

    def cut(request: Request, seen: int) -> int | None:
        if request.path.endswith("/output") and cuts["left"] > 0:
            cuts["left"] -= 1
            return 700
        return None

    proxy = CuttingProxy(port, cut)
    try:
        api = connect(proxy.url, server.token)
        created = api.create_job("summarize", summarize("the quick brown fox jumps over the lazy dog"))
        events = api.stream(str(created.job.id))
    finally:
        proxy.close()
    outputs = [r for r in proxy.requests if r.path.endswith("/output")]
    assert len(outputs) >= 3, "both cut connections were resumed"
    assert outputs[1].headers.get("last-event-id"), "resumed after the last event seen"
    ids = [int(e.id) for e in events if not isinstance(e, Partial)]
    assert ids == list(range(1, len(ids) + 1)), f"every event once, in order: {ids}"
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 3
    last = events[-1]
    assert isinstance(last, Result)
    assert json.loads("".join(texts)) == last.result, "the text put together is the result"
    partials = [e for e in events if isinstance(e, Partial)]
    assert partials and partials[-1].value == last.result


def test_a_stream_of_a_job_that_fails_for_good_ends_with_its_error(start: StartServer, connect: Connect) -> None:
    server = start(lambda text: text.replace('failover = ["sim-slow"]', "failover = []", 1).replace("max_attempts = 5", "max_attempts = 1", 1))
    api = connect(server.url, server.token)
    created = api.create_job("summarize", summarize("bad json"), provider="sim-bad-json")
    events = api.stream(str(created.job.id))
    assert isinstance(events[-1], ErrorEvent) and events[-1].state == "failed", events
