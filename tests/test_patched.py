"""core/patched.py: a class attribute wrapped for a while, the wrappers undone in either order."""
from perfsight.core.patched import Patched


class Target:
    def who(self) -> list[str]:
        return ["original"]


def tagging(tag: str, patch: list):
    def wrap(original):
        def wrapper(self):
            return ([tag] if patch[0].active else []) + original(self)
        return wrapper
    return wrap


def patched(tag: str) -> Patched:
    holder: list = []
    holder.append(Patched(Target, "who", tagging(tag, holder)))
    return holder[0]


def test_wrappers_undone_last_first_leave_the_original():
    first, second = patched("first"), patched("second")
    assert Target().who() == ["second", "first", "original"]
    second.remove()
    assert Target().who() == ["first", "original"]
    first.remove()
    assert Target.who is first.original and Target().who() == ["original"]


def test_a_wrapper_undone_under_a_later_one_passes_calls_through_until_that_one_goes_too():
    first, second = patched("first"), patched("second")
    first.remove()                                   # the second wraps it: it stays, passing calls through
    assert Target().who() == ["second", "original"]
    second.remove()                                  # both are gone now: the original is back
    assert Target.who is first.original and Target().who() == ["original"]


def test_a_wrapper_someone_else_put_on_top_keeps_ours_in_the_chain():
    ours = patched("ours")
    original = Target.who
    Target.who = lambda self: ["theirs"] + original(self)
    ours.remove()
    assert Target().who() == ["theirs", "original"] and Target.who is not ours.original
    Target.who = ours.original                       # (the test puts the class back as it found it)
