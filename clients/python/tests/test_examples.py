"""The examples, run as a user runs them, against a real server on each
backend: the batch script twice (the second run makes nothing), and the
FastAPI relay served by uvicorn on a real socket, driven as a browser
would (a click sent twice, an answer stream cut and resumed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from server import Server, free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_rerunning_the_batch_script_makes_no_new_job(server: Server, tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"row-{i}", "input": {"text": f"item {i}"}}) + "\n" for i in range(12)))
    env = {**os.environ, "ONEJOB_URL": server.url, "ONEJOB_TOKEN": server.token}

    def run() -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "batch_submit.py"), "nightly", str(items)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        report: dict[str, int] = json.loads(done.stdout)
        return report

    assert run() == {"jobs": 12, "made": 12, "found": 0}
    assert run() == {"jobs": 12, "made": 0, "found": 12}
    page = httpx.get(f"{server.url}/jobs?limit=100", headers={"authorization": f"Bearer {server.token}"}).json()
    assert len(page["jobs"]) == 12


@pytest.fixture
def relay(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The FastAPI example served by uvicorn, in front of `server`."""
    monkeypatch.setenv("ONEJOB_URL", server.url)
    monkeypatch.setenv("ONEJOB_TOKEN", server.token)
    spec = importlib.util.spec_from_file_location(f"fastapi_relay_{id(server)}", EXAMPLES / "fastapi_relay.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    port = free_port()
    served = uvicorn.Server(uvicorn.Config(module.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not served.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    served.should_exit = True
    thread.join(10)


def read_events(response: httpx.Response, most: int | None = None) -> list[dict[str, Any]]:
    """The Server-Sent Events of `response`, `most` of them at most."""
    events: list[dict[str, Any]] = []
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if line == "":
            if event:
                events.append(event)
                event = {}
                if most is not None and len(events) >= most:
                    break
            continue
        name, _, value = line.partition(": ")
        event[name] = json.loads(value) if name == "data" else value
    return events


def test_the_fastapi_relay_makes_one_job_per_click_and_its_answer_stream_resumes(relay: str, server: Server) -> None:
    browser = httpx.Client(base_url=relay, headers={"x-user": "ada"}, timeout=30)
    click = {"click_id": "5f1c6d0e-click", "message": "What does an idempotency key do?"}
    first = browser.post("/ask", json=click).json()
    again = browser.post("/ask", json=click).json()
    assert first["job_id"] == again["job_id"] and again["replayed"], (first, again)
    other = browser.post("/ask", json={**click, "click_id": "another-click"}).json()
    assert other["job_id"] != first["job_id"], "another click is another job"

    # The browser reads three events, loses the connection, and resumes.
    with browser.stream("GET", f"/answers/{first['job_id']}") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        seen = read_events(response, most=3)
    with browser.stream("GET", f"/answers/{first['job_id']}", headers={"last-event-id": seen[-1]["id"]}) as response:
        seen += read_events(response)
    ids = [int(e["id"]) for e in seen]
    assert ids == list(range(ids[0], ids[0] + len(ids))), f"every event once, in order: {ids}"
    assert seen[-1]["event"] == "result", seen[-1]
    text = "".join(e["data"]["text"] for e in seen if e["event"] == "text")
    assert text and text == seen[-1]["data"]["result"], "the text put together is the result"
