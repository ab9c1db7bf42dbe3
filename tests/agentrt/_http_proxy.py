"""A tiny forwarding HTTP proxy for fault tests of the openai backend (stdlib only).

    python _http_proxy.py PORT UPSTREAM [FAIL_FIRST]

Forwards every request to UPSTREAM (http://127.0.0.1:P). The first FAIL_FIRST chat requests get
HTTP 503 instead (to exercise retries). Killing this process mid-request is how a test makes an
endpoint die under in-flight requests without touching the real vLLM server.
"""

import http.client
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

PORT, UPSTREAM = int(sys.argv[1]), urlsplit(sys.argv[2])
fail_left = int(sys.argv[3]) if len(sys.argv) > 3 else 0
lock = threading.Lock()


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _forward(self):
        global fail_left
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/chat/completions"):
            with lock:
                fail = fail_left > 0
                fail_left -= fail
            if fail:
                msg = b'{"error": {"message": "overloaded (injected)"}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                return
        conn = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = _forward


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Proxy)
    print("ready", flush=True)
    server.serve_forever()
