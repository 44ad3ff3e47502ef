"""Browser-test harness: an insight server in a thread, and waiting for a view to render."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class InsightServer:
    """uvicorn serving create_app(RunLibrary(base)) in a thread, on a free port."""

    def __init__(self, base: Path):
        import uvicorn

        from perfsight.insight.library import RunLibrary
        from perfsight.insight.server import create_app

        self.library = RunLibrary(base, rescan_seconds=1.0)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(self.library), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> InsightServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the insight server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

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
