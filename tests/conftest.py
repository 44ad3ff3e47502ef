"""Shared test helpers: where the real traces of ../shared/data are."""
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the real traces are not beside the checkout ({SHARED_DATA})")
    return SHARED_DATA
