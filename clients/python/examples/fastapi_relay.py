"""A FastAPI backend between a browser and onejob: a click becomes one job
per intent, and the job's output goes back to the browser as Server-Sent
Events the browser can resume.

    ONEJOB_URL=http://127.0.0.1:8080 ONEJOB_TOKEN=oj_... uvicorn fastapi_relay:app

- `POST /ask` with `{"click_id", "message"}`: the browser makes `click_id`
  once per click (`crypto.randomUUID()`, kept in `sessionStorage`) and sends
  it again with every retry of that click. The job's idempotency key is
  derived from the user and the click (`DerivedKeyStore`), so a retry that
  lands on another worker process, or after a restart, finds the same job.
- `GET /answers/{job_id}`: the job's output as `text/event-stream`; a
  browser that lost the connection reconnects with `Last-Event-ID` and
  goes on from there, with nothing twice.

Who the user is comes from your own authentication; here, the `X-User`
header stands in for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from onejob import AsyncOnejobClient, DerivedKeyStore, ErrorEvent, OutputEvent, Partial, Restart, Result, TextDelta, Waiting

onejob = AsyncOnejobClient(
    os.environ.get("ONEJOB_URL", "http://127.0.0.1:8080"),
    os.environ.get("ONEJOB_TOKEN"),
    key_store=DerivedKeyStore("fastapi-relay"),
)
app = FastAPI()


class Ask(BaseModel):
    click_id: str
    message: str


@app.post("/ask")
async def ask(ask: Ask, x_user: str = Header()) -> dict[str, object]:
    """One job per click, however often the click is sent."""
    created = await onejob.create_job("chat", {"message": ask.message}, intent=f"{x_user}:{ask.click_id}")
    return {"job_id": str(created.job.id), "replayed": created.replayed}


def as_sse(event: OutputEvent) -> str:
    """An output event as one Server-Sent Event, with its durable id."""
    if isinstance(event, TextDelta):
        kind, data = "text", {"text": event.text}
    elif isinstance(event, Partial):
        kind, data = "partial", {"value": event.value}
    elif isinstance(event, Restart):
        kind, data = "restart", {}
    elif isinstance(event, Waiting):
        kind, data = "waiting", {"waiting_for": event.awaiting.waiting_for, "next": event.awaiting.next}
    elif isinstance(event, Result):
        kind, data = "result", {"result": event.result}
    else:
        kind, data = "error", {"state": event.state, "error": event.error}
    return f"id: {event.id}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"


@app.get("/answers/{job_id}")
async def answer(job_id: str, request: Request) -> StreamingResponse:
    """The job's output, from after the browser's `Last-Event-ID`."""
    after = request.headers.get("last-event-id")

    async def relay() -> AsyncIterator[str]:
        async for event in onejob.stream(job_id, after=after):
            yield as_sse(event)
            if isinstance(event, (Result, ErrorEvent)):
                return

    return StreamingResponse(relay(), media_type="text/event-stream", headers={"cache-control": "no-store"})
