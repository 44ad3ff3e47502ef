"""Placeholder until the timeline routes land (the timeline helper replaces this file)."""
from fastapi import APIRouter


def router(get_run) -> APIRouter:
    return APIRouter()
