"""The one-process lock (core/pidlock.py): a second holder waits or is refused, naming the first by pid."""
import multiprocessing
import os
import threading

import pytest

from perfsight.core.pidlock import LockHeld, holding


def _hold_until(path, ready, release):
    with holding(path, wait=False):
        ready.set()
        release.wait(60)


@pytest.fixture
def held_elsewhere(tmp_path):
    """The lock held by another process until the test releases it: (path, that process, its release)."""
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    path = tmp_path / "x.lock"
    holder = context.Process(target=_hold_until, args=(path, ready, release))
    holder.start()
    assert ready.wait(60)
    yield path, holder, release
    release.set()
    holder.join(60)


def test_a_second_process_is_refused_naming_the_holder(held_elsewhere):
    path, holder, _ = held_elsewhere
    with pytest.raises(LockHeld) as refused:
        with holding(path, wait=False):
            pass
    assert refused.value.holder == str(holder.pid)


def test_a_waiting_process_is_told_whom_it_waits_for_and_takes_the_lock_once_freed(held_elsewhere):
    path, holder, release = held_elsewhere
    told, took = [], threading.Event()

    def wait_for_it():
        with holding(path, wait=True, on_wait=lambda pid: (told.append(pid), release.set())):
            took.set()
    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    waiter.join(60)
    assert told == [str(holder.pid)] and took.is_set()
    assert path.read_text() == str(os.getpid())          # the pid of the process holding it last
