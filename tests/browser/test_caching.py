"""Static files are cached by the browser: loading the page again fetches the shell (index.html) again, but
neither Plotly (3.5 MB) nor the page scripts, which are served at URLs that name their version, with
Cache-Control immutable."""
from __future__ import annotations

import shutil

import pytest

from perfsight.views.insight import server as insight_server
from perfsight.views.insight.library import RunLibrary
from perfsight.views.insight.server import create_app

from .harness import AppServer, wait_rendered

pytestmark = pytest.mark.browser


def test_a_second_load_takes_plotly_and_the_scripts_from_the_cache(browser, tmp_path, monkeypatch):
    fresh = shutil.copy(insight_server.plotly_js(), tmp_path / "plotly.min.js")   # as just installed: a browser
    monkeypatch.setattr(insight_server, "plotly_js", lambda: fresh)               # can't guess it is still fresh
    (tmp_path / "runs").mkdir()
    app = create_app(RunLibrary(tmp_path / "runs"))
    requested = []

    async def counted(scope, receive, send):        # the server's own count of what it was asked for
        if scope["type"] == "http":
            requested.append(scope["path"])
        await app(scope, receive, send)

    context = browser.new_context()                 # no request routing: it would turn the HTTP cache off
    try:
        page = context.new_page()
        with AppServer(counted) as server:
            page.goto(server.url + "/#/")
            wait_rendered(page)
            page.reload()
            wait_rendered(page)
            assert page.locator("body").get_attribute("data-state") == "ready"
    finally:
        context.close()
    plotly = [p for p in requested if p.endswith("/plotly.min.js")]
    scripts = [p for p in requested if p.endswith("/app.js")]
    assert requested.count("/") == 2 and len(plotly) == 1 and len(scripts) == 1, requested
