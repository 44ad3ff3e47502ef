"""The insight app over the shared summary-base-dirs through FastAPI's TestClient (``served_runs`` over
``runs_dir``, ``served_flops`` over ``flops_dir``; parsed once per session), and ``expected``: an analysis
result as the API should send it."""
from __future__ import annotations

import time

import pytest

from perfsight.views.jsonable import plain


class Served:
    """create_app(RunLibrary(base, **options)) through a TestClient: runs found by the start of their path."""

    def __init__(self, base, **options):
        from fastapi.testclient import TestClient

        from perfsight.views.insight.library import RunLibrary
        from perfsight.views.insight.server import create_app

        self.library = RunLibrary(base, **options)
        self.client = TestClient(create_app(self.library), base_url="http://127.0.0.1")

    def __enter__(self) -> Served:
        self.client.__enter__()
        deadline = time.monotonic() + 120
        while not all(r["status"] in ("ready", "error") for r in self.library.entries()):
            assert time.monotonic() < deadline, self.library.entries()
            time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        self.client.__exit__(*exc)

    def id(self, prefix: str) -> str:
        (run,) = [r for r in self.library.entries() if r["path"].startswith(prefix)]
        assert run["status"] == "ready", run
        return run["id"]

    def tables(self, prefix: str):
        return self.library.get(self.id(prefix)).tables

    def get(self, prefix: str, route: str, **params) -> dict:
        response = self.client.get(f"/api/runs/{self.id(prefix)}/{route}", params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def refused(self, prefix: str, route: str, status: int = 400, **params) -> str:
        response = self.client.get(f"/api/runs/{self.id(prefix)}/{route}", params=params)
        assert response.status_code == status, response.text
        return response.json()["detail"]


def expected(table, origin: int = 0, *times: str) -> list[dict]:
    """``table``'s rows as JSON sends them (NaN as None), the ``times`` columns made relative to ``origin``."""
    rows = plain(table)
    for row in rows:
        for column in times:
            if row[column] is not None:
                row[column] -= origin
    return rows


@pytest.fixture(scope="session")
def served_runs(runs_dir):
    with Served(runs_dir) as served:
        yield served


@pytest.fixture(scope="session")
def served_flops(flops_dir):
    with Served(flops_dir) as served:
        yield served
