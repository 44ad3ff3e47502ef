"""Browser-test fixtures: an insight server on a free loopback port and headless Debian Chromium driven
by Playwright (its own browser downloads are never used: executable_path points at /usr/bin/chromium).

Every page is opened in a context that records (and aborts) any request leaving 127.0.0.1; tests end
by asserting that list is empty (``page.external_requests``).

Waiting is for a condition, never for a time: ``expect`` and every wait and action wait up to ``WAIT_MS`` for
theirs (Playwright's own 5 s for ``expect`` is a page or two of a large run on a busy machine).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .harness import InsightServer

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
#: how long an expectation, a wait or an action waits for its condition (ms)
WAIT_MS = 60_000


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed; .ci/run installs Debian's chromium for the browser tests")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def server(runs_dir):
    """insight over ``runs_dir``, every run parsed (shared by the page tests)."""
    with InsightServer(runs_dir) as server:
        server.wait_parsed()
        yield server


@pytest.fixture
def serve():
    """serve(base_dir) -> a started InsightServer (stopped at teardown)."""
    servers = []

    def start(base: Path) -> InsightServer:
        server = InsightServer(base).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture
def page(browser):
    """A fresh page; ``page.external_requests`` lists every request to a host other than 127.0.0.1
    (aborted), and ``page.console_errors`` the page's console errors and uncaught exceptions."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.external_requests = []
    page.console_errors = []

    def guard(route):
        host = route.request.url.split("/")[2].split(":")[0] if "://" in route.request.url else ""
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            page.external_requests.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    page.on("console", lambda msg: page.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    yield page
    context.close()
