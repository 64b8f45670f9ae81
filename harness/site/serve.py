"""``harness site --serve``: serve a built site on localhost with the standard library's http.server."""

from __future__ import annotations

import functools
import http.server
from pathlib import Path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def make_server(directory: str | Path, port: int = 8000, host: str = "127.0.0.1") -> http.server.HTTPServer:
    """A threading HTTP server for ``directory`` bound to ``host:port`` (port 0: any free port)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve(directory: str | Path, port: int = 8000, host: str = "127.0.0.1") -> None:
    """Serve until interrupted (Ctrl-C), printing the address."""
    try:
        server = make_server(directory, port, host)
    except OSError as e:
        raise ValueError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror}); give another port") from None
    with server:
        print(f"serving {directory} at http://{host}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped")
