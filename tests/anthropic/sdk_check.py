"""The official anthropic package against the simulator: what the real SDK
parses, the simulator must answer. Run with the simulator's base URL; prints
"ok" when every check passed, and fails with the first that did not.

Providers it expects (set up by the test): sdk-messages (Messages API,
fast), sdk-stream (the same, streamed at 500 tokens/s), sdk-overloaded
(every call answers 529 with retry-after: 1), sdk-limited (every call
answers 429 with retry-after: 1) and sdk-cached (fast, reporting 3 tokens
read from the cache and 2 written to it on every answer).
"""

import json
import sys
import time

import anthropic
import httpx2
from anthropic import Anthropic
from anthropic.types import TextBlock, ToolUseBlock

SIM = sys.argv[1]
SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "word_count": {"type": "integer"}},
    "required": ["summary", "word_count"],
    "additionalProperties": False,
}
ANSWER = {"summary": "the quick brown fox", "word_count": 4}
# This SDK has no `temperature` argument: it goes in the body as it is.
JOB = {"onejob_input": {"task": "summarize", "input": {"text": "the quick brown fox"}}, "temperature": 0}
MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Summarize: the quick brown fox"}]}]
TOOLS = [{"name": "summarize", "description": "Record the summary.", "input_schema": SCHEMA}]
FORCED = {"type": "tool", "name": "summarize"}


def client(provider, max_retries=0):
    return Anthropic(base_url=f"{SIM}/providers/{provider}", api_key="sk-ant-simulated", max_retries=max_retries)


def ask(provider, request_id, max_retries=0, **kwargs):
    return client(provider, max_retries).messages.create(
        model="sim-1",
        max_tokens=256,
        system="You summarize text.",
        messages=MESSAGES,
        extra_body=JOB,
        extra_headers={"X-Client-Request-Id": request_id},
        **kwargs,
    )


# A message without tools: one text block holding the answer's JSON.
message = ask("sdk-messages", "sdk-message")
assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant", message
assert message._request_id and message._request_id.startswith("req_"), message._request_id
assert len(message.content) == 1 and isinstance(message.content[0], TextBlock), message.content
assert json.loads(message.content[0].text) == ANSWER, message.content[0].text
assert message.stop_reason == "end_turn" and message.stop_sequence is None, message
assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0, message.usage

# A forced tool: one tool_use block whose input is the answer.
message = ask("sdk-messages", "sdk-tool", tools=TOOLS, tool_choice=FORCED)
block = message.content[0]
assert isinstance(block, ToolUseBlock) and block.name == "summarize", message.content
assert block.id.startswith("toolu_") and block.input == ANSWER, block
assert message.stop_reason == "tool_use", message

# The forced tool streamed through the SDK's helper: the input comes in
# pieces of JSON, the final message put together from them.
with client("sdk-stream").messages.stream(
    model="sim-1",
    max_tokens=256,
    system="You summarize text.",
    messages=MESSAGES,
    tools=TOOLS,
    tool_choice=FORCED,
    extra_body=JOB,
    extra_headers={"X-Client-Request-Id": "sdk-stream-tool"},
) as stream:
    events = list(stream)
    final = stream.get_final_message()
types = [e.type for e in events]
assert types[0] == "message_start" and types[-1] == "message_stop", types
pieces = [e for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
assert len(pieces) > 3, types
assert json.loads("".join(e.delta.partial_json for e in pieces)) == ANSWER, pieces
assert isinstance(final.content[0], ToolUseBlock) and final.content[0].input == ANSWER, final.content
assert final.stop_reason == "tool_use" and final.usage.output_tokens > 0, final

# A plain text stream (the SDK drops `ping` itself): its text_delta pieces
# put together are the answer; message_delta says why it stopped.
events = list(ask("sdk-stream", "sdk-stream-text", stream=True))
types = [e.type for e in events]
assert types[0] == "message_start" and events[0].message.id.startswith("msg_"), events[0]
assert types[-1] == "message_stop", types
assert types.index("content_block_start") < types.index("content_block_delta") < types.index("content_block_stop"), types
pieces = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
assert len(pieces) > 3, pieces
assert json.loads("".join(pieces)) == ANSWER, pieces
delta = [e for e in events if e.type == "message_delta"][-1]
assert delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens > 0, delta

# Counting a prompt's tokens.
count = client("sdk-messages").messages.count_tokens(
    model="sim-1",
    system="You summarize text.",
    messages=MESSAGES,
    extra_headers={"X-Client-Request-Id": "sdk-count"},
)
assert count.input_tokens > 0, count

# A 529: the SDK raises its OverloadedError (an InternalServerError) with
# the Anthropic error envelope and the request id.
try:
    ask("sdk-overloaded", "sdk-overloaded")
    raise AssertionError("a 529 was not raised")
except anthropic.OverloadedError as error:
    assert isinstance(error, anthropic.InternalServerError) and error.status_code == 529, error
    assert error.body["type"] == "error" and error.body["error"]["type"] == "overloaded_error", error.body
    assert error.body["request_id"].startswith("req_"), error.body
    assert error.response.headers.get("retry-after") == "1", error.response.headers
    assert error.request_id and error.request_id.startswith("req_"), error.response.headers

# A 429: the SDK raises RateLimitError.
try:
    ask("sdk-limited", "sdk-limited")
    raise AssertionError("a 429 was not raised")
except anthropic.RateLimitError as error:
    assert error.status_code == 429 and error.body["error"]["type"] == "rate_limit_error", error.body
    assert error.response.headers.get("retry-after") == "1", error.response.headers
    assert error.request_id and error.request_id.startswith("req_"), error.response.headers

# The SDK retries a 529 (any status >= 500, unless x-should-retry: false)
# and waits what retry-after-ms, else retry-after says; without either it
# would wait 0.375-0.5 s. One retry after retry-after: 1 takes a second.
start = time.monotonic()
try:
    ask("sdk-overloaded", "sdk-overloaded-retried", max_retries=1)
    raise AssertionError("a 529 was not raised")
except anthropic.OverloadedError:
    elapsed = time.monotonic() - start
assert elapsed >= 0.9, elapsed

# Cache tokens, reported apart from the input tokens they are taken from.
plain = ask("sdk-messages", "sdk-uncached").usage
usage = ask("sdk-cached", "sdk-cached").usage
assert usage.cache_read_input_tokens == 3 and usage.cache_creation_input_tokens == 2, usage
assert usage.input_tokens + 5 == plain.input_tokens, (usage, plain)

# A request without max_tokens, which the SDK will not send: refused in
# the Anthropic error envelope.
response = httpx2.post(
    f"{SIM}/providers/sdk-messages/v1/messages",
    headers={"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-simulated", "X-Client-Request-Id": "sdk-no-max"},
    json={"model": "sim-1", "messages": MESSAGES, **JOB},
)
assert response.status_code == 400, (response.status_code, response.text)
body = response.json()
assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
assert response.headers.get("request-id", "").startswith("req_"), response.headers

print("ok")
