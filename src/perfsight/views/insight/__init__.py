"""perfsight insight: the local web UI over analysis results (``perfsight insight --summary-base-dir DIR``).

discovery finds the runs under the base directory; library parses them in the background and keeps a
few open; server is the FastAPI app (static pages, Plotly from the installed package, security headers);
api_overview, api_operators, api_resources and api_timeline are the JSON routes the pages draw from
(responses encodes them); static/ holds the shell (app.js, util.js) and one script per page (pages/).
"""
