"""The official runpod package against the simulator's copy of RunPod serverless.

Run by the test the_official_fal_and_runpod_sdks_use_the_simulators_jobs with
the simulator's URL; prints "ok" when every check passes.
"""

import json
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import requests
import runpod

url = sys.argv[1]
runpod.api_key = "rp_test"

received = queue.Queue()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        received.put(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


hooks = HTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hooks.serve_forever, daemon=True).start()
hook = f"http://127.0.0.1:{hooks.server_port}/hook"

# A job run with a webhook, followed by its status and its output.
runpod.endpoint_url_base = f"{url}/providers/sdk-runpod/v2"
endpoint = runpod.Endpoint("sim-endpoint")
job = endpoint.run({"input": {"prompt": "a red kite", "size": 16}, "webhook": hook})
assert job.job_id, job
assert job.status() in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED"), job.status()
output = job.output(timeout=30)
assert output["images"][0].startswith("data:image/png;base64,"), output
assert job.status() == "COMPLETED"
state = job._fetch_job()
assert state["executionTime"] > 0 and state["id"] == job.job_id, state

# Its webhook: the job's status.
told = received.get(timeout=10)
assert told["id"] == job.job_id and told["status"] == "COMPLETED" and told["output"] == output, told

# A job of the slow provider, canceled while it runs.
runpod.endpoint_url_base = f"{url}/providers/sdk-slow-runpod/v2"
slow = runpod.Endpoint("sim-endpoint").run({"prompt": "slow"})
assert slow.status() in ("IN_QUEUE", "IN_PROGRESS"), slow.status()
canceled = slow.cancel()
assert canceled["status"] == "CANCELLED", canceled
assert slow.status() == "CANCELLED"

# An unknown job is not found.
try:
    runpod.Endpoint("sim-endpoint").rp_client.get("sim-endpoint/status/00000000-0000-0000-0000-000000000000")
    raise AssertionError("an unknown job was found")
except requests.HTTPError as error:
    assert error.response.status_code == 404, error
print("ok")
