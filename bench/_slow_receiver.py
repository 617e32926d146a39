"""A webhook receiver for bench/sinks.py, in a process of its own: each POST is answered after LATENCY seconds
(a JSON array of outputs, or one output); a GET answers how many distinct outputs it holds. Prints its port."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATENCY = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
seen: set[tuple[str, int]] = set()
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        items = body if isinstance(body, list) else [body]
        time.sleep(LATENCY)  # the receiver's own work: what the benchmark is about
        with lock:
            seen.update((item["subscription"], item["seq"]) for item in items)
        self.answer(b"")

    def do_GET(self) -> None:
        with lock:
            count = len(seen)
        self.answer(str(count).encode())

    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
