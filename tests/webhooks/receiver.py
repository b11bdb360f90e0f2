"""A webhook receiver for the tests, verifying with the standardwebhooks
package (the Standard Webhooks reference library, written elsewhere).

Prints {"port": N} once listening on 127.0.0.1, then reads the endpoint's
signing secret from its standard input (one line). For each POST it prints
one JSON line: the webhook-id, whether the signature verified, the body,
and the status it answered. It answers 500 to the first FAIL_FIRST
requests (its first argument), then THEN (its second argument, 204 by
default).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook

FAIL_FIRST = int(sys.argv[1]) if len(sys.argv) > 1 else 0
THEN = int(sys.argv[2]) if len(sys.argv) > 2 else 204
state = {"seen": 0, "secret": None}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            Webhook(state["secret"]).verify(body, headers)
            verified, error = True, None
        except Exception as problem:  # the library's verification error, whatever its class
            verified, error = False, str(problem)
        state["seen"] += 1
        status = 500 if state["seen"] <= FAIL_FIRST else THEN
        print(json.dumps({
            "id": headers.get("webhook-id"),
            "verified": verified,
            "error": error,
            "body": body.decode("utf-8", "replace"),
            "status": status,
        }), flush=True)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


server = HTTPServer(("127.0.0.1", 0), Receiver)
print(json.dumps({"port": server.server_address[1]}), flush=True)
state["secret"] = sys.stdin.readline().strip()
server.serve_forever()
