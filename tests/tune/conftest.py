"""Every tuning test starts at the thread count the session started with: a test that pins torch to one
thread (to be offered the Schedule candidates, or to time steadily) does not leave the next test there."""
import pytest
import torch

_SESSION_THREADS = torch.get_num_threads()


@pytest.fixture(autouse=True)
def _session_threads():
    torch.set_num_threads(_SESSION_THREADS)
    yield
    torch.set_num_threads(_SESSION_THREADS)
