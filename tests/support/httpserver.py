"""A real HTTP server on loopback that serves files from a dict (with ranges, a cut download,
busy answers), and a small ROCm tree's tarball to serve."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.cut_after: int | None = None  # stop a full download after this many bytes
        self.fail_next = 0  # answer this many requests with 503 (a busy mirror)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                if server.fail_next > 0:
                    server.fail_next -= 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", rng or "")
                if match:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.cut_after is not None and not match:
                    # The connection drops mid-way, as on a flaky network.
                    self.wfile.write(body[: server.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


# Incompressible, so the download spans many network reads.
PADDING = b"".join(hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(20000))


def small_tree_tarball(top: str = "rocm-6.4.1", extra: dict[str, bytes] | None = None) -> bytes:
    """A tarball of a small tree with the files validation looks at (plus some padding so that
    a download has several chunks)."""
    files = {
        ".info/version": b"6.4.1\n",
        "lib/llvm/bin/clang": b"#!/bin/sh\n",
        "lib/libamdhip64.so.6": b"\x7fELF",
        "lib/cmake/hip/hip-config.cmake": b"",
        "lib/llvm/amdgcn/bitcode/ocml.bc": b"BC",
        "lib/llvm/amdgcn/bitcode/oclc_isa_version_90a.bc": b"BC",
        "share/padding.bin": PADDING,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
