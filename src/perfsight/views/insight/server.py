"""The insight web application: FastAPI app, static pages, Plotly from the installed package, security.

``create_app(library)`` assembles the HTTP surface: the page shell and its scripts (package data only:
nothing under the summary-base-dir is served as a file), Plotly.js from the installed ``plotly`` package (no
request leaves the machine); the shell names them at URLs holding ``asset_version`` and they are served
``IMMUTABLE``, so a browser loads them once per version of perfsight and plotly; the run list, and the
per-run routers (pages, the Cluster page of any job, timeline) and the Compare page's, which find runs by id
through ``LoadedRun``, and the Live page's (the armed jobs under the base dir: ``api_live``)
lookups (a page that needs the merged tables of a job analysed rank by rank answers 409: ``NotMerged``). Every
response carries a Content-Security-Policy that allows scripts from this origin only, so a trace's names can never
run as script even if a page mishandled one. Requests whose Host header does not name the server
(``served_names``: the address served, and the names given) are refused (DNS rebinding), however it is
written (``[::1]:8080``, ``LOCALHOST``).

``serve`` runs it with uvicorn; loopback only unless ``allow_remote``.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
import socket
import threading
import webbrowser
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from perfsight.core.errors import InputError
from perfsight.views.insight import (
    api_cluster,
    api_compare,
    api_live,
    api_operators,
    api_overview,
    api_resources,
    api_timeline,
)
from perfsight.views.insight.library import LoadedRun, NotMerged, RunLibrary, RunNotReady

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
log = logging.getLogger("perfsight.views.insight")
#: addresses that listen on every interface, and the loopback address a browser on this machine uses for them
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
#: Cache-Control of the scripts, styles and Plotly, whose URLs name their version (``asset_version``)
IMMUTABLE = "public, max-age=31536000, immutable"


def plotly_js() -> Path:
    """plotly.min.js from the installed ``plotly`` package."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def asset_version() -> str:
    """A hash of the static files and of the Plotly version: the URL segment naming this version of the
    page's assets."""
    import plotly

    digest = hashlib.sha256(plotly.__version__.encode())
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file()):
        digest.update(path.relative_to(STATIC).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


class _VersionedFiles(StaticFiles):
    """The static files, at a URL that names their version: the browser keeps them (``IMMUTABLE``)."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = IMMUTABLE
        return response


def create_app(library: RunLibrary, *, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The app; ``allowed_hosts``: the names a request's Host header may give (``served_names``; default
    the loopback names)."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        library.start()
        yield
        library.close()

    library.prepare_job = api_cluster.prepare
    app = FastAPI(title="perfsight insight", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    allowed = {_host_name(name) for name in allowed_hosts or LOOPBACK_NAMES}

    @app.middleware("http")
    async def host_check(request: Request, call_next):
        if _host_name(request.headers.get("host", "")) not in allowed:
            return PlainTextResponse("Invalid host header: not a name this server is served at (perfsight "
                                     "insight --allowed-host NAME allows another)", status_code=400)
        return await call_next(request)

    @app.middleware("http")                # added last: the outer one, so refusals carry the headers too
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

    @app.exception_handler(NotMerged)
    async def not_merged(request: Request, error: NotMerged):
        entry = error.entry.as_dict()
        return JSONResponse({"detail": f"{entry['path']} is a job of {len(entry['ranks']):,} ranks, analysed rank by "
                                       "rank (its ranks are never merged): its Cluster page shows the job, and each "
                                       "rank opens alone, with its own pages, from there", "run": entry},
                            status_code=409)

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

    for pages in (api_overview, api_operators, api_resources, api_cluster, api_timeline, api_compare):
        app.include_router(pages.router(get_run))
    app.include_router(api_live.router(library))

    version = asset_version()
    shell = (STATIC / "index.html").read_text(encoding="utf-8")
    shell = shell.replace('"/static/', f'"/static/{version}/').replace('"/vendor/', f'"/vendor/{version}/')

    @app.get(f"/vendor/{version}/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript", headers={"Cache-Control": IMMUTABLE})

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:           # small, and names the assets' version: asked for at every load
        return HTMLResponse(shell, headers={"Cache-Control": "no-cache"})

    app.mount(f"/static/{version}", _VersionedFiles(directory=STATIC), name="static")
    return app


def _host_name(host: str) -> str | None:
    """The name a Host header or an address gives, lower case, without brackets, port or IPv6 zone, one
    spelling per address; None for what names no host."""
    try:
        ipaddress.ip_address(host.split("%")[0])
        name = host                                        # an address as --host takes it: IPv6 without brackets
    except ValueError:
        try:
            name = urlsplit("//" + host).hostname or ""    # a Host header: brackets, port
        except ValueError:
            return None
    name = name.split("%")[0]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def served_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The names a browser may call insight listening on ``host`` by (the Host header check): the address
    itself, the loopback names for a loopback address, for a wildcard (0.0.0.0, ::) also this machine's
    name and its interfaces' addresses, and the ``extra`` names (--allowed-host)."""
    names = [host]
    if is_loopback(host) or host in WILDCARDS:
        names += LOOPBACK_NAMES
    if host in WILDCARDS:
        import psutil

        families = (socket.AF_INET,) if host == "0.0.0.0" else (socket.AF_INET, socket.AF_INET6)
        names += [socket.gethostname(), socket.getfqdn()]
        names += [a.address for nic in psutil.net_if_addrs().values() for a in nic if a.family in families]
    return sorted({name for name in map(_host_name, [*names, *extra]) if name})


def served_url(host: str, port: int) -> str:
    """The URL to open for insight listening on ``host``: a wildcard's loopback address, IPv6 in brackets."""
    shown = WILDCARDS.get(host, host)
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/"


def serve(base: Path, *, host: str = "127.0.0.1", port: int = 8080, allow_remote: bool = False,
          allowed_hosts: Sequence[str] = (), open_browser: bool = False, workers: int = 1) -> None:
    """Serve the runs under ``base`` until interrupted."""
    import uvicorn

    base = Path(base)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host     # [::1] as in a URL
    if not base.is_dir():
        raise InputError(f"--summary-base-dir {base}: not a directory; expected the folder holding the runs")
    if not is_loopback(host) and not allow_remote:
        raise InputError(f"--host {host}: not a loopback address; insight serves your traces without "
                         "authentication, so binding elsewhere needs --allow-remote")
    for name in (host, *allowed_hosts):
        if _host_name(name) is None:
            raise InputError(f"{'--host' if name == host else '--allowed-host'} {name!r}: not a host name or "
                             "address; expected e.g. 127.0.0.1, ::1, localhost or a DNS name of this machine")
    allowed = served_names(host, allowed_hosts)
    if not is_loopback(host):
        log.warning("insight is listening on %s: anyone who can reach this address can read these runs", host)
        print(f"perfsight insight: WARNING: listening on {host}; anyone who can reach it can read the runs under "
              f"{base}; browsers must call it by one of: {', '.join(allowed)} (--allowed-host adds a name)")
    app = create_app(RunLibrary(base, workers=workers), allowed_hosts=allowed)
    url = served_url(host, port)
    print(f"perfsight insight: serving {base.resolve()} at {url} (Ctrl+C to stop)")
    if open_browser:
        threading.Timer(1.0, webbrowser.open, [url]).start()   # once uvicorn listens
    uvicorn.run(app, host=host, port=port, log_level="warning")
