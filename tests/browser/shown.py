"""What the insight pages show, computed in Python for the page tests: the pages' number formats (as
util.js writes them), links to a run's page, waiting for an element's data-state, counting a Plotly
chart's traces and the colour drawn at a point."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from playwright.sync_api import expect


def _fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed (ties away from zero on the exact binary value)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def fmt_ns(ns) -> str:
    """PS.fmtNs."""
    if ns is None:
        return "–"
    size = abs(ns)
    if size >= 1e9:
        return _fixed(ns / 1e9, 3) + " s"
    if size >= 1e6:
        return _fixed(ns / 1e6, 3) + " ms"
    if size >= 1e3:
        return _fixed(ns / 1e3, 2) + " µs"
    return f"{round(ns)} ns"


def fmt_pct(percent) -> str:
    """PS.fmtPct."""
    return "–" if percent is None else _fixed(percent, 1) + "%"


def fmt_num(n) -> str:
    """PS.fmtNum (en-US grouping)."""
    return "–" if n is None else f"{n:,}"


def page_url(server, prefix: str, page: str, *params: str) -> str:
    """The URL of ``page`` of the run whose path starts with ``prefix``."""
    from urllib.parse import quote

    (run,) = [r for r in server.library.entries() if r["path"].startswith(prefix)]
    assert run["status"] == "ready", run
    return f"{server.url}/#/run/{run['id']}/{page}" + "".join("/" + quote(p, safe="") for p in params)


def tables_of(server, prefix: str):
    """The tables of the run whose path starts with ``prefix``."""
    (run,) = [r for r in server.library.entries() if r["path"].startswith(prefix)]
    return server.library.get(run["id"]).tables


def ready(page, selector: str):
    """The element of ``selector`` once its data-state is ready."""
    expect(page.locator(f"{selector}[data-state=ready]")).to_have_count(1, timeout=30_000)
    return page.locator(selector)


def traces(page, chart_id: str) -> list[dict]:
    """The traces of a drawn Plotly chart (type, name, and the number of points)."""
    chart = ready(page, f"#{chart_id}.js-plotly-plot")
    return chart.evaluate("el => el.data.map(t => ({type: t.type, name: t.name ?? null, "
                          "points: (t.y || t.values || []).length}))")


def cells(page, table_selector: str, column: int) -> list[str]:
    """The text of one column (0-based) of a table's body rows."""
    return page.locator(f"{table_selector} tbody tr").evaluate_all(
        f"rows => rows.map(r => r.cells[{column}].textContent)")


def pixel(page, x: float, y: float) -> tuple[int, int, int]:
    """The colour (R, G, B) drawn at viewport point (x, y): a 1 x 1 screenshot there, its PNG decoded (one row
    of one pixel: every PNG filter leaves its bytes as they are)."""
    import struct
    import zlib

    png = page.screenshot(clip={"x": x, "y": y, "width": 1, "height": 1})
    chunks, at = {}, 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        chunks[kind] = chunks.get(kind, b"") + png[at + 8:at + 8 + length]
        at += 12 + length
    bit_depth, colour_type = chunks[b"IHDR"][8], chunks[b"IHDR"][9]
    assert bit_depth == 8 and colour_type in (2, 6), (bit_depth, colour_type)      # RGB or RGBA
    row = zlib.decompress(chunks[b"IDAT"])
    return row[1], row[2], row[3]


def luminance(rgb: tuple[int, int, int]) -> float:
    """How light a colour is, 0 (black) to 255 (white): Rec. 709's weights."""
    return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
