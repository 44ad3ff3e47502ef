"""Step and rank sets written as their runs."""
import pytest

from perfsight.core.numbers import number_runs


@pytest.mark.parametrize("numbers, text", [
    ([], "none"), ([3], "3"), (range(256), "0-255"), ([5, 0, 1, 2, 2, 7, 8, 10], "0-2, 5, 7-8, 10"),
])
def test_numbers_are_written_as_their_runs(numbers, text):
    assert number_runs(numbers) == text
