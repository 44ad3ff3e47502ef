"""The page shell and its assets: the shell is asked for at every load; the scripts, styles and Plotly are
at URLs naming their version and kept by the browser (Cache-Control immutable, ETag for revalidation),
and a change to any static file gives them new URLs."""
from __future__ import annotations

import re
import shutil

from fastapi.testclient import TestClient

from perfsight.views.insight import server as insight_server
from perfsight.views.insight.library import RunLibrary
from perfsight.views.insight.server import create_app


def test_the_shell_names_versioned_assets_that_the_browser_keeps(tmp_path):
    with TestClient(create_app(RunLibrary(tmp_path)), base_url="http://127.0.0.1") as client:
        shell = client.get("/")
        assert shell.status_code == 200 and shell.headers["cache-control"] == "no-cache"
        urls = re.findall(r'(?:src|href)="(/[^"]+)"', shell.text)
        assert len(urls) == 18 and "/vendor/" in urls[2]
        assert all(re.fullmatch(r"/(static|vendor)/[0-9a-f]{12}/[\w/.]+", url) for url in urls), urls
        for url in urls:
            answer = client.get(url)
            assert answer.status_code == 200 and answer.headers["etag"], url
            assert answer.headers["cache-control"] == "public, max-age=31536000, immutable", url
        again = client.get(urls[0], headers={"If-None-Match": client.get(urls[0]).headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        assert client.get("/static/app.js").status_code == 404           # only the versioned URLs


def test_a_changed_static_file_changes_every_asset_url(tmp_path, monkeypatch):
    first = insight_server.asset_version()
    copy = shutil.copytree(insight_server.STATIC, tmp_path / "static")
    monkeypatch.setattr(insight_server, "STATIC", copy)
    assert insight_server.asset_version() == first
    (copy / "style.css").write_text((copy / "style.css").read_text() + "\n/* changed */\n")
    assert insight_server.asset_version() != first
