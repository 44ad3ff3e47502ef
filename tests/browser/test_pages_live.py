"""The Live page in a real browser while a real armed job trains (tests/live_job.py): the rank and its step-time
curve with each capture marked, a capture listed as soon as it lands (no reload), and its link opening the
capture's run."""
from __future__ import annotations

import threading

import pytest
from playwright.sync_api import expect

from tests.live_job import armed_training
from tests.waiting import wait_until

from .harness import open_view, wait_rendered

pytestmark = pytest.mark.browser


def test_the_live_page_lists_captures_as_they_land_and_opens_them(serve, page, tmp_path):
    server = serve(tmp_path)
    job = tmp_path / "job"
    second = threading.Event()
    taken, failed = [], []

    def train():
        try:
            taken.extend(armed_training(job, captures=2, steps=3, between=lambda index: second.wait(120)))
        except Exception as error:  # noqa: BLE001 - asserted below
            failed.append(error)

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        wait_until(lambda: list(job.glob("capture_*/PROF_*/host/data/trace_*.pt.trace.json")), "the first capture")
        open_view(page, server.url + "/#/")
        page.locator("#live-link").click()
        wait_rendered(page)
        captures = page.locator("#live-captures tbody tr")
        expect(captures).to_have_count(1)
        expect(page.locator("#live-ranks")).to_contain_text("rank 0: armed")
        expect(page.locator("#live-steps-0[data-state=ready]")).to_have_count(1)
        second.set()                                            # the second capture lands while the page is open
        expect(captures).to_have_count(2)
    finally:
        second.set()
        trainer.join(timeout=120)
    assert not failed, failed
    first = taken[0]
    row = captures.nth(0)
    expect(row).to_contain_text(f"{first.start_step}-{first.last_step}")
    expect(row).to_contain_text("requested by perfsight capture")
    expect(page.locator("#live-ranks")).to_contain_text("rank 0: ended")
    row.locator("a.capture-link").click()                   # the capture is a run: its Overview opens
    wait_rendered(page)
    expect(page.locator("#run-title")).to_contain_text(first.folder.name)
    assert page.url.endswith("/overview")
    assert page.external_requests == []
    assert page.console_errors == []
