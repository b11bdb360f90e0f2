"""The official replicate package against the simulator's Replicate API.

Run by the test the_official_replicate_sdk_reads_the_simulators_predictions_and_takes_its_webhooks
with the simulator's URL; prints "ok" when every check passes.
"""

import json
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import replicate
from replicate.exceptions import ReplicateError
from replicate.webhook import InvalidSignatureError, Webhooks

url = sys.argv[1]
client = replicate.Client(api_token="r8_test", base_url=f"{url}/providers/sdk-replicate")
slow = replicate.Client(api_token="r8_test", base_url=f"{url}/providers/sdk-slow")

received = queue.Queue()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        received.put((dict(self.headers), body.decode()))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=server.serve_forever, daemon=True).start()
hook = f"http://127.0.0.1:{server.server_port}/hook"

# A model's prediction, followed by polling and by its webhook.
made = client.predictions.create(
    model="acme/painter",
    input={"prompt": "a red kite", "size": 16},
    webhook=hook,
    webhook_events_filter=["completed"],
)
assert made.status == "starting", made.status
made.wait()
assert made.status == "succeeded", made.status
assert made.output[0].startswith("data:image/png;base64,"), made.output
assert made.metrics["predict_time"] > 0, made.metrics
headers, body = received.get(timeout=10)
secret = client.webhooks.default.secret()
assert secret.key.startswith("whsec_"), secret.key
Webhooks.validate(headers=headers, body=body, secret=secret, tolerance=300)
assert json.loads(body)["id"] == made.id and json.loads(body)["status"] == "succeeded"
try:
    Webhooks.validate(headers=headers, body=body.replace("succeeded", "failed"), secret=secret)
    raise AssertionError("a changed body passed")
except InvalidSignatureError:
    pass

# A version's prediction, held until done (Prefer: wait).
held = client.predictions.create(version="5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa",
                                 input={"prompt": "held"}, wait=True)
assert held.status == "succeeded", held.status

# A deployment's prediction, read back by its id.
deployed = client.predictions.create(deployment="acme/painter-prod", input={"prompt": "deployed"})
assert client.predictions.get(deployed.id).id == deployed.id

# Listed, the latest first.
listed = [p.id for p in client.predictions.list().results]
assert listed[:1] == [deployed.id] and made.id in listed, listed

# Canceled while it runs.
running = slow.predictions.create(model="acme/painter", input={"prompt": "slow"})
running.cancel()
running.reload()
assert running.status == "canceled", running.status

# No token, no prediction.
try:
    replicate.Client(api_token="", base_url=f"{url}/providers/sdk-replicate").predictions.get(made.id)
    raise AssertionError("read without a token")
except ReplicateError as error:
    assert error.status == 401, error

print("ok")
