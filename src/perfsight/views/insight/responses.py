"""JSON responses of the insight API: analysis results (Arrow tables, dicts, numbers) as JSON.

Arrow tables become lists of row objects and NaN/inf become null (``views.json_report.plain``);
encoded with orjson.
"""
from __future__ import annotations

import orjson
from fastapi import Response

from perfsight.views.jsonable import plain


def json_response(value) -> Response:
    return Response(orjson.dumps(plain(value), default=str), media_type="application/json")
