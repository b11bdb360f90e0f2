"""Submits a batch of jobs idempotently: one job per line of a JSON Lines
file, each line an object with its `id` and the task's `input`. The key of
each job is derived from the batch's name and the line's id
(`DerivedKeyStore`), so running the script again (after a crash, or twice
by mistake) makes no new job: it finds the ones already made.

    ONEJOB_URL=http://127.0.0.1:8080 ONEJOB_TOKEN=oj_... python batch_submit.py NAME FILE.jsonl [TASK]
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from onejob import Created, DerivedKeyStore, OnejobClient


def submit(client: OnejobClient, batch: str, task: str, line: dict[str, Any]) -> Created:
    return client.create_job(task, line["input"], intent=f"{batch}:{line['id']}")


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    batch, path = argv[1], argv[2]
    task = argv[3] if len(argv) > 3 else "summarize"
    with open(path, encoding="utf-8") as lines:
        items = [json.loads(line) for line in lines if line.strip()]
    store = DerivedKeyStore(f"batch:{batch}")
    with OnejobClient(os.environ["ONEJOB_URL"], os.environ.get("ONEJOB_TOKEN"), key_store=store) as client:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda line: submit(client, batch, task, line), items))
    made = sum(1 for created in results if not created.replayed)
    print(json.dumps({"jobs": len(results), "made": made, "found": len(results) - made}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
