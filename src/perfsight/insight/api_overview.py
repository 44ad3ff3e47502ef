"""Placeholder: the page routes land here (replaced by the pages work)."""
from fastapi import APIRouter


def router(get_run) -> APIRouter:
    return APIRouter(prefix="/api/runs/{run_id}")
