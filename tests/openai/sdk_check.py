"""The official openai package against the simulator: what the real SDK
parses, the simulator must answer. Run by tests/it/openai.rs with the
simulator's base URL; prints "ok" when every check passed, and fails with
the first that did not.

Providers it expects (set up by the test): sdk-responses (Responses API,
fast), sdk-slow (Responses API, slow, cancelable), sdk-limited (Responses
API answering 429), sdk-chat (chat completions, fast), sdk-stream (the
same, streamed), sdk-stream-broken (a stream broken after 3 pieces) and
sdk-responses-broken (Responses API, its first stream broken after 3
pieces).
"""

import json
import sys
import time

import openai
from openai import OpenAI
from pydantic import BaseModel

SIM = sys.argv[1]
SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "word_count": {"type": "integer"}},
    "required": ["summary", "word_count"],
    "additionalProperties": False,
}
JOB = {"onejob_input": {"task": "summarize", "input": {"text": "the quick brown fox"}}}


def client(provider):
    return OpenAI(base_url=f"{SIM}/providers/{provider}/v1", api_key="sk-simulated", max_retries=0)


def wait(responses, response_id):
    for _ in range(500):
        response = responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.02)
    raise AssertionError(f"{response_id} never finished")


def background(provider, request_id):
    return client(provider).responses.create(
        model="sim-1",
        instructions="You summarize text.",
        input=[{"role": "user", "content": "Summarize: the quick brown fox"}],
        background=True,
        store=True,
        temperature=0,
        max_output_tokens=256,
        text={"format": {"type": "json_schema", "name": "summarize", "schema": SCHEMA, "strict": True}},
        extra_body=JOB,
        extra_headers={"X-Client-Request-Id": request_id},
    )


# A background response: created queued, read until completed.
created = background("sdk-responses", "sdk-background")
assert created.id.startswith("resp_") and created.status == "queued", created
done = wait(client("sdk-responses").responses, created.id)
assert done.status == "completed", done
assert json.loads(done.output_text) == {"summary": "the quick brown fox", "word_count": 4}, done.output_text
assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0, done.usage

# A slow one, canceled.
slow = background("sdk-slow", "sdk-canceled")
canceled = client("sdk-slow").responses.cancel(slow.id)
assert canceled.status == "cancelled", canceled
assert client("sdk-slow").responses.retrieve(slow.id).status == "cancelled"

# What the SDK raises for a missing response and a rate limit.
try:
    client("sdk-responses").responses.retrieve("resp_missing")
    raise AssertionError("a missing response was found")
except openai.NotFoundError:
    pass
try:
    background("sdk-limited", "sdk-limited")
    raise AssertionError("a 429 was not raised")
except openai.RateLimitError as error:
    assert error.response.headers.get("retry-after") == "1", error.response.headers


# A chat completion under a strict schema the SDK makes from a model, and
# parses back into it.
class Summary(BaseModel):
    summary: str
    word_count: int


parsed = client("sdk-chat").chat.completions.parse(
    model="sim-1",
    messages=[{"role": "user", "content": "Summarize: the quick brown fox"}],
    response_format=Summary,
    max_completion_tokens=256,
    extra_body=JOB,
    extra_headers={"X-Client-Request-Id": "sdk-chat"},
)
choice = parsed.choices[0]
assert choice.finish_reason == "stop", choice
assert choice.message.parsed == Summary(summary="the quick brown fox", word_count=4), choice.message
assert parsed.usage.prompt_tokens > 0, parsed.usage

# A streamed chat completion: the SDK reads its chunks; the content put
# together is the answer, the last chunk carries the usage.
chunks = list(
    client("sdk-stream").chat.completions.create(
        model="sim-1",
        messages=[{"role": "user", "content": "Summarize: the quick brown fox"}],
        max_completion_tokens=256,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=JOB,
        extra_headers={"X-Client-Request-Id": "sdk-stream"},
    )
)
assert all(c.object == "chat.completion.chunk" for c in chunks), chunks
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert json.loads(text) == {"summary": "the quick brown fox", "word_count": 4}, text
assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3, "sent in pieces"
assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop", chunks
assert not chunks[-1].choices and chunks[-1].usage.completion_tokens > 0, chunks[-1]

def until_broken(stream):
    """The items of a stream that must break: those read before it did."""
    seen = []
    try:
        for item in stream:
            seen.append(item)
        raise AssertionError(f"a broken stream ended cleanly: {seen}")
    except openai.APIConnectionError:
        pass
    except Exception as error:  # httpx's own error, when the SDK passes it on
        assert "peer closed" in str(error) or "incomplete" in str(error).lower(), repr(error)
    return seen


# A stream broken after 3 pieces: the SDK raises, having read those.
seen = until_broken(
    client("sdk-stream-broken").chat.completions.create(
        model="sim-1",
        messages=[{"role": "user", "content": "Summarize: the quick brown fox"}],
        stream=True,
        extra_body=JOB,
        extra_headers={"X-Client-Request-Id": "sdk-stream-broken"},
    )
)
assert len([c for c in seen if c.choices and c.choices[0].delta.content]) == 3, seen

# A streamed background response broken after 3 pieces of text: the SDK
# reads its events up to the break, then resumes the stream after the last
# sequence number it read and gets the rest, none twice.
first = until_broken(
    client("sdk-responses-broken").responses.create(
        model="sim-1",
        input=[{"role": "user", "content": "Summarize: the quick brown fox"}],
        background=True,
        store=True,
        stream=True,
        extra_body=JOB,
        extra_headers={"X-Client-Request-Id": "sdk-responses-stream"},
    )
)
assert first[0].type == "response.created" and first[0].response.id.startswith("resp_"), first[0]
assert [e.type for e in first].count("response.output_text.delta") == 3, [e.type for e in first]
rest = list(
    client("sdk-responses-broken").responses.retrieve(
        first[0].response.id, stream=True, starting_after=first[-1].sequence_number
    )
)
numbers = [e.sequence_number for e in first + rest]
assert numbers == list(range(len(numbers))), numbers
text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
assert json.loads(text) == {"summary": "the quick brown fox", "word_count": 4}, text
assert rest[-1].type == "response.completed", rest[-1]
assert rest[-1].response.output_text == text and rest[-1].response.usage.output_tokens > 0, rest[-1]

print("ok")
