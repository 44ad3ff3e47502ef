"""The run list in a real browser: every run listed with its status, a broken run's error on its own row,
new runs appearing without a restart, and no request leaving the machine."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.conftest import copy_shared

from .harness import open_view

pytestmark = pytest.mark.browser


def test_run_list_shows_runs_errors_and_new_runs(serve, page, shared_data, tmp_path):
    copy_shared(shared_data / "kineto" / "hta" / "cpu_only", tmp_path / "cpu_only")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "bad.pt.trace.json").write_text("this is not json")
    server = serve(tmp_path)
    server.wait_parsed()
    open_view(page, server.url + "/#/")
    rows = page.locator("#run-list tbody tr")
    assert rows.count() == 2
    text = page.locator("#run-list").inner_text()
    assert "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz" in text and "ready" in text
    broken = rows.filter(has_text="bad.pt.trace.json")
    assert "error" in broken.inner_text() and "not JSON" in broken.inner_text()

    copy_shared(shared_data / "kineto" / "hta" / "amd_trace", tmp_path / "amd")
    expect(rows).to_have_count(3, timeout=30_000)
    page.locator("#run-list").get_by_text("mi250_minitoy_train_ROCm6_2_kineto.json.gz").wait_for()
    assert page.external_requests == []
    assert page.console_errors == []
