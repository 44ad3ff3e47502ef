"""PLACEHOLDER (lead's local stub until the engines branch lands): runs tasks in this process."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskLost:
    index: int
    attempts: int
    why: str


class Serial:
    description = "this process"
    workers = 1

    def map(self, function, items, on_result):
        for index, item in enumerate(items):
            on_result(index, function(item))


def engine_for(ray=None, workers=None):
    return Serial()


Engine = Serial
