"""A TCP proxy in front of a server that records every request and may cut
an answer mid-way: for a request a rule picks, it forwards that many bytes
of the answer and then resets the connection, as a connection lost after
the server did the work would. It may also answer a request itself (an
overloaded gateway's 503). Each connection carries one request (the proxy
asks the server to close after it)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


class CuttingProxy:
    """Listens on a free loopback port (`url`) and forwards to `port`;
    `cut(request, seen)` returns how many bytes of its answer to forward
    before cutting (None: all), `seen` counting the requests before it;
    `answer(request, seen)` returns a whole answer to send instead of
    forwarding (None: forward)."""

    def __init__(
        self,
        port: int,
        cut: Callable[[Request, int], int | None] = lambda request, seen: None,
        answer: Callable[[Request, int], bytes | None] = lambda request, seen: None,
    ) -> None:
        self.target = port
        self.cut = cut
        self.answer = answer
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            head, body = _read_request(client)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            request = Request(method, path, headers)
            with self._lock:
                seen = len(self.requests)
                self.requests.append(request)
            answer = self.answer(request, seen)
            if answer is not None:
                client.sendall(answer)
                return
            limit = self.cut(request, seen)
            kept = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
            upstream_head = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
            with socket.create_connection(("127.0.0.1", self.target)) as upstream:
                upstream.sendall(upstream_head + body)
                forwarded = 0
                while True:
                    chunk = upstream.recv(65536)
                    if not chunk:
                        return
                    if limit is not None and forwarded + len(chunk) >= limit:
                        client.sendall(chunk[: limit - forwarded])
                        # An abrupt end: a reset, as a connection lost.
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
                    client.sendall(chunk)
                    forwarded += len(chunk)


def _read_request(client: socket.socket) -> tuple[bytes | None, bytes]:
    """A request's head and its body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head, rest


def overloaded(retry_after: str) -> bytes:
    """A gateway's 503 `unavailable`, with `Retry-After`."""
    problem = b'{"type":"unavailable","title":"Unavailable","status":503}'
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n"
        f"retry-after: {retry_after}\r\ncontent-length: {len(problem)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + problem
