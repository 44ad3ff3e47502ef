"""The insight web application: FastAPI app, static pages, Plotly from the installed package, security.

``create_app(library)`` assembles the HTTP surface: the page shell and its scripts (package data only:
nothing under the summary-base-dir is served as a file), Plotly.js from the installed ``plotly`` package
(no request leaves the machine), the run list, and the per-run routers (pages, timeline), which find
runs by id through ``LoadedRun`` lookups. Every response carries a Content-Security-Policy that allows
scripts from this origin only, so a trace's names can never run as script even if a page mishandled
one. Requests whose Host header is not the address served are refused (DNS rebinding).

``serve`` runs it with uvicorn; loopback only unless ``allow_remote``.
"""
from __future__ import annotations

import ipaddress
import logging
import threading
import webbrowser
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..errors import InputError
from . import api_operators, api_overview, api_resources, api_timeline
from .library import LoadedRun, RunLibrary, RunNotReady

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
log = logging.getLogger("perfsight.insight")


def plotly_js() -> Path:
    """plotly.min.js from the installed ``plotly`` package."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def create_app(library: RunLibrary, *, allowed_hosts: list[str] | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        library.start()
        yield
        library.close()

    app = FastAPI(title="perfsight insight", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or ["127.0.0.1", "localhost", "::1"])

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.exception_handler(RunNotReady)
    async def not_ready(request: Request, error: RunNotReady):
        entry = error.entry.as_dict()
        detail = (f"run {entry['path']} failed to parse: {entry['error']}" if entry["status"] == "error"
                  else f"run {entry['path']} is {entry['status']} ({entry['progress']:.0%})")
        return JSONResponse({"detail": detail, "run": entry}, status_code=409)

    @app.exception_handler(InputError)
    async def bad_input(request: Request, error: InputError):
        return JSONResponse({"detail": str(error)}, status_code=422)

    def get_run(run_id: str) -> LoadedRun:
        loaded = library.get(run_id)
        if loaded is None:
            raise HTTPException(404, f"no run with id {run_id!r} under the summary-base-dir")
        return loaded

    @app.get("/api/runs")
    def runs() -> dict:
        return {"base": library.base.name or str(library.base), "runs": library.entries()}

    @app.get("/api/runs/{run_id}")
    def run(run_id: str) -> dict:
        entry = library.entry(run_id)
        if entry is None:
            raise HTTPException(404, f"no run with id {run_id!r} under the summary-base-dir")
        return entry.as_dict()

    for pages in (api_overview, api_operators, api_resources, api_timeline):
        app.include_router(pages.router(get_run))

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(base: Path, *, host: str = "127.0.0.1", port: int = 8080, allow_remote: bool = False,
          open_browser: bool = False, workers: int = 1) -> None:
    """Serve the runs under ``base`` until interrupted."""
    import uvicorn

    base = Path(base)
    if not base.is_dir():
        raise InputError(f"--summary-base-dir {base}: not a directory; expected the folder holding the runs")
    if not is_loopback(host) and not allow_remote:
        raise InputError(f"--host {host}: not a loopback address; insight serves your traces without "
                         "authentication, so binding elsewhere needs --allow-remote")
    allowed = ["127.0.0.1", "localhost", "::1"] if is_loopback(host) else ["*"]
    if not is_loopback(host):
        log.warning("insight is listening on %s: anyone who can reach this address can read these runs", host)
        print(f"perfsight insight: WARNING: listening on {host}; anyone who can reach it can read the runs under "
              f"{base}")
    app = create_app(RunLibrary(base, workers=workers), allowed_hosts=allowed)
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
    print(f"perfsight insight: serving {base.resolve()} at {url} (Ctrl+C to stop)")
    if open_browser:
        threading.Timer(1.0, webbrowser.open, [url]).start()   # once uvicorn listens
    uvicorn.run(app, host=host, port=port, log_level="warning")
