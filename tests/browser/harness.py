"""Browser-test harness: a test server (any app, or insight over a folder) in a thread, and waiting for a
view to render."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class AppServer:
    """uvicorn serving an ASGI app in a thread, on a free loopback port (a context manager)."""

    def __init__(self, app):
        import uvicorn

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


class InsightServer(AppServer):
    """The insight app over ``base`` (rescanning every second)."""

    def __init__(self, base: Path):
        from perfsight.views.insight.library import RunLibrary
        from perfsight.views.insight.server import create_app

        self.library = RunLibrary(base, rescan_seconds=1.0)
        super().__init__(create_app(self.library))

    def wait_parsed(self, timeout: float = 120) -> list[dict]:
        """Block until no run is queued or parsing; the run list."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.library.entries()
            if runs and all(r["status"] in ("ready", "error") for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs still parsing after {timeout} s: {runs}")
            time.sleep(0.1)


def open_view(page, url: str, timeout: float = 60_000) -> None:
    """Go to ``url`` and wait until the shell says the view has rendered (ready or error)."""
    page.goto(url)
    wait_rendered(page, timeout)


def wait_rendered(page, timeout: float = 60_000) -> None:
    """Wait for the shell's ready/error mark (a selector wait: the pages' CSP forbids evaluated strings)."""
    page.wait_for_selector("body[data-state=ready], body[data-state=error]", state="attached", timeout=timeout)
