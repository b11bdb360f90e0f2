"""The official fal-client package against the simulator's copy of fal's queue API.

Run by the test the_official_fal_and_runpod_sdks_use_the_simulators_jobs with
the simulator's URL; prints "ok" when every check passes. fal-client speaks to
its queue host over https only, so the check puts a TLS proxy in front of the
simulator, with a certificate of its own made here and trusted through
SSL_CERT_FILE.
"""

import datetime
import hashlib
import http.client
import json
import os
import queue
import ssl
import sys
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.x509.oid import NameOID
import ipaddress

simulator = urllib.parse.urlsplit(sys.argv[1])

# A certificate for localhost, and its key.
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
now = datetime.datetime.now(datetime.timezone.utc)
certificate = (
    x509.CertificateBuilder()
    .subject_name(name)
    .issuer_name(name)
    .public_key(key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(now - datetime.timedelta(minutes=5))
    .not_valid_after(now + datetime.timedelta(hours=1))
    .add_extension(
        x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        critical=False,
    )
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .sign(key, hashes.SHA256())
)
folder = tempfile.mkdtemp()
cert_file, key_file = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
with open(cert_file, "wb") as out:
    out.write(certificate.public_bytes(serialization.Encoding.PEM))
with open(key_file, "wb") as out:
    out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


class Forward(BaseHTTPRequestHandler):
    """Forwards each request to the simulator, saying it came over https."""

    protocol_version = "HTTP/1.1"

    def forward(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "content-length")}
        headers["X-Forwarded-Proto"] = "https"
        upstream = http.client.HTTPConnection(simulator.hostname, simulator.port, timeout=30)
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("connection", "content-length", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()

    do_GET = do_POST = do_PUT = do_DELETE = forward

    def log_message(self, *args):
        pass


proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert_file, key_file)
proxy.socket = context.wrap_socket(proxy.socket, server_side=True)
threading.Thread(target=proxy.serve_forever, daemon=True).start()

# fal-client reads these when it is imported.
os.environ["SSL_CERT_FILE"] = cert_file
os.environ["FAL_KEY"] = "sim-key:sim-secret"
queue_host = f"localhost:{proxy.server_port}/providers/sdk-fal/fal"
os.environ["FAL_QUEUE_RUN_HOST"] = queue_host

import fal_client  # noqa: E402
import httpx  # noqa: E402

received = queue.Queue()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        received.put((dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


hooks = HTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hooks.serve_forever, daemon=True).start()
hook = f"http://127.0.0.1:{hooks.server_port}/hook"

client = fal_client.SyncClient()

# A job submitted with a webhook, followed by its status, and its result.
handle = client.submit("acme/painter/fast", arguments={"prompt": "a red kite", "size": 16}, webhook_url=hook)
assert handle.request_id, handle
status = handle.status(with_logs=True)
assert isinstance(status, (fal_client.Queued, fal_client.InProgress, fal_client.Completed)), status
result = handle.get()
image = result["images"][0]
assert image["url"].startswith("data:image/png;base64,") and image["content_type"] == "image/png", image
assert image["width"] == 16, image
completed = client.status("acme/painter", handle.request_id, with_logs=True)
assert isinstance(completed, fal_client.Completed) and completed.error is None, completed
assert completed.metrics["inference_time"] > 0, completed.metrics
assert client.result("acme/painter", handle.request_id) == result

# Its webhook, signed by a key the simulator publishes.
headers, body = received.get(timeout=10)
headers = {k.lower(): v for k, v in headers.items()}
payload = json.loads(body)
assert payload["status"] == "OK" and payload["request_id"] == handle.request_id, payload
assert payload["payload"] == result, payload
keys = httpx.get(f"https://{queue_host}/.well-known/jwks.json").json()["keys"]


def verifies(body: bytes) -> bool:
    message = "\n".join(
        [
            headers["x-fal-webhook-request-id"],
            headers["x-fal-webhook-user-id"],
            headers["x-fal-webhook-timestamp"],
            hashlib.sha256(body).hexdigest(),
        ]
    ).encode()
    signature = bytes.fromhex(headers["x-fal-webhook-signature"])
    for jwk in keys:
        public = Ed25519PublicKey.from_public_bytes(
            __import__("base64").urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
        )
        try:
            public.verify(signature, message)
            return True
        except Exception:
            pass
    return False


assert verifies(body), "the webhook's signature verifies"
assert not verifies(body.replace(b'"OK"', b'"ERROR"')), "a changed body does not"

# A slow job of the other provider (the same client pointed at its queue),
# canceled while it runs; an unknown one is not found.
fal_client.client.QUEUE_URL_FORMAT = f"https://localhost:{proxy.server_port}/providers/sdk-slow-fal/fal/"
slow = client.submit("acme/slow", arguments={"prompt": "slow"})
assert isinstance(slow.status(), (fal_client.Queued, fal_client.InProgress)), slow.status()
slow.cancel()
try:
    client.status("acme/slow", "00000000-0000-0000-0000-000000000000")
    raise AssertionError("an unknown request was found")
except fal_client.client.FalClientHTTPError as error:
    assert error.status_code == 404, error
print("ok")
