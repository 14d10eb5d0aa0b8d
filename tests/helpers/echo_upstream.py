"""An upstream for gateway tests: answers each request with what it received, as JSON."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class EchoUpstream:
    """Serves on a free loopback port in a thread; ``seen`` lists every request received."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received = {
                    "method": self.command,
                    "path": self.path,
                    "headers": [[name, value] for name, value in self.headers.items()],
                    "body": self.rfile.read(length).decode("latin-1"),
                }
                upstream.seen.append(received)
                body = json.dumps(received).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.do_GET()

            def do_DELETE(self) -> None:
                self.do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def paths(self) -> list[str]:
        return [received["path"] for received in self.seen]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def headers_of(received: dict[str, Any], name: str) -> list[str]:
    """Return every value of the header ``name`` the upstream received, in any case."""
    return [value for key, value in received["headers"] if key.lower() == name.lower()]
