"""A small CPU predictor for onejob's tests against a real Cog server.

It draws a PNG (a square of the colour its `tag` hashes to) after sleeping
`seconds` in short steps, so that a cancel reaches it between two steps;
a server started with ONEJOB_COG_TIME_SCALE sleeps that share of it (a
fast server for the same input).
Every run appends a line to the file ONEJOB_COG_RUNS names: "started",
then "finished" or "canceled", with its tag, so a test counts the runs the
server made whatever onejob says.
"""

import hashlib
import json
import os
import struct
import tempfile
import time
import zlib

from cog import BasePredictor, Input, Path


def record(event: str, tag: str) -> None:
    runs = os.environ.get("ONEJOB_COG_RUNS")
    if runs:
        with open(runs, "a", encoding="utf-8") as log:
            log.write(json.dumps({"event": event, "tag": tag, "at": time.time()}) + "\n")


def png(size: int, rgb: bytes, level: int = 6) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + rgb * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, level)) + chunk(b"IEND", b"")


class Predictor(BasePredictor):
    def predict(
        self,
        tag: str = Input(default="", description="Named in the runs' log"),
        prompt: str = Input(default="", description="As an image model's; the tag when none is given"),
        seconds: float = Input(default=0.5, ge=0, le=600),
        size: int = Input(default=8, ge=1, le=8192),
        fail: bool = Input(default=False, description="Raise instead of drawing"),
        raw: bool = Input(default=False, description="Store the pixels uncompressed: a file of about 3 × size² bytes"),
    ) -> Path:
        tag = tag or prompt
        record("started", tag)
        try:
            scale = float(os.environ.get("ONEJOB_COG_TIME_SCALE", "1"))
            until = time.monotonic() + seconds * scale
            while time.monotonic() < until:
                time.sleep(min(0.05, max(0.0, until - time.monotonic())))
        except BaseException:
            record("canceled", tag)
            raise
        if fail:
            record("failed", tag)
            raise ValueError(f"asked to fail ({tag})")
        out = Path(tempfile.mkdtemp()) / "out.png"
        out.write_bytes(png(size, hashlib.sha256(tag.encode()).digest()[:3], 0 if raw else 6))
        record("finished", tag)
        return out
