"""The fixtures: a server on each backend (a fresh SQLite file; a fresh
database of one throwaway Postgres cluster), and each client (`sync`,
`async`) behind one synchronous face (`Api`), so that both pass the same
tests."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import PostgresCluster, Server, start_server  # noqa: E402

from onejob import AsyncOnejobClient, OnejobClient, RetryPolicy  # noqa: E402
from onejob._common import Added, Created, NotNow, OutputEvent, Polled, WatchedJob  # noqa: E402
from onejob.models import Job  # noqa: E402


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    cluster.start()
    yield cluster
    cluster.stop()


StartServer = Callable[[Callable[[str], str]], Server]


@pytest.fixture(params=["sqlite", "postgres"])
def start(request: pytest.FixtureRequest) -> Iterator[StartServer]:
    """Starts servers on the backend of the test's parameter, each with its
    configuration's text changed as asked; all stopped after the test."""
    started: list[Server] = []

    def starting(edit: Callable[[str], str] = lambda text: text) -> Server:
        database = None
        if request.param == "postgres":
            database = request.getfixturevalue("postgres").fresh_database()
        server = start_server(database, edit)
        started.append(server)
        return server

    yield starting
    for server in started:
        server.stop()


@pytest.fixture
def server(start: StartServer) -> Server:
    """A server with the default configuration."""
    return start(lambda text: text)


FAST_RETRY = RetryPolicy(max_tries=6, base_delay=0.05, max_delay=1.0, max_elapsed=30.0)


class Api:
    """One client (sync or async) behind synchronous calls."""

    def __init__(self, kind: str, url: str, token: str, **options: Any) -> None:
        self.kind = kind
        options.setdefault("retry", FAST_RETRY)
        if kind == "sync":
            self.sync: OnejobClient | None = OnejobClient(url, token, **options)
            self.asyncio: AsyncOnejobClient | None = None
        else:
            self.loop = asyncio.new_event_loop()
            self.sync = None
            self.asyncio = AsyncOnejobClient(url, token, **options)

    def _run(self, make: Callable[[AsyncOnejobClient], Any]) -> Any:
        assert self.asyncio is not None
        return self.loop.run_until_complete(make(self.asyncio))

    def create_job(self, task: str, input: Any, **options: Any) -> Created:
        if self.sync:
            return self.sync.create_job(task, input, **options)
        created: Created = self._run(lambda c: c.create_job(task, input, **options))
        return created

    def get_job(self, job_id: str) -> Job:
        if self.sync:
            return self.sync.get_job(job_id)
        job: Job = self._run(lambda c: c.get_job(job_id))
        return job

    def poll(self, job_id: str, wait: int, etag: str) -> Polled:
        if self.sync:
            return self.sync.get_job(job_id, wait=wait, etag=etag)
        polled: Polled = self._run(lambda c: c.get_job(job_id, wait=wait, etag=etag))
        return polled

    def fallback(self, job_id: str, provider: str | None = None, **options: Any) -> Added | NotNow:
        if self.sync:
            return self.sync.fallback(job_id, provider, **options)
        answer: Added | NotNow = self._run(lambda c: c.fallback(job_id, provider, **options))
        return answer

    def cancel(self, job_id: str) -> Job:
        if self.sync:
            return self.sync.cancel(job_id)
        job: Job = self._run(lambda c: c.cancel(job_id))
        return job

    def stream(self, job_id: str, after: str | None = None) -> list[OutputEvent]:
        if self.sync:
            return list(self.sync.stream(job_id, after=after))

        async def collect(c: AsyncOnejobClient) -> list[OutputEvent]:
            return [event async for event in c.stream(job_id, after=after)]

        events: list[OutputEvent] = self._run(collect)
        return events

    def watch_until(self, job_id: str, done: Callable[[WatchedJob], bool], **options: Any) -> list[WatchedJob]:
        """The watch's items up to the first for which `done` holds."""
        seen: list[WatchedJob] = []
        if self.sync:
            for item in self.sync.watch(job_id, **options):
                seen.append(item)
                if done(item):
                    return seen
            return seen

        async def collect(c: AsyncOnejobClient) -> None:
            async for item in c.watch(job_id, **options):
                seen.append(item)
                if done(item):
                    return

        self._run(lambda c: asyncio.wait_for(collect(c), 60))
        return seen

    def close(self) -> None:
        if self.sync:
            self.sync.close()
        else:
            self._run(lambda c: c.aclose())
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def client_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def connect(client_kind: str) -> Iterator[Callable[..., Api]]:
    """Makes clients of the test's kind; closed after the test."""
    made: list[Api] = []

    def connecting(url: str, token: str, **options: Any) -> Api:
        api = Api(client_kind, url, token, **options)
        made.append(api)
        return api

    yield connecting
    for api in made:
        api.close()
