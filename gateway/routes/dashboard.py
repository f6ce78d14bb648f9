"""``/dashboard``: a live, self-contained page of the gateway's own ``/metrics``.

The page and its script ship inside the package (``gateway/static``) and load
nothing from any other origin: the browser fetches ``/metrics`` once a second and
draws the histograms, quantiles and controller telemetry itself. With
``DLFP_METRICS_TOKEN`` set the page asks for that token when /metrics answers 401, keeps
it in the tab's ``sessionStorage`` and sends it as a bearer header. The page and its
script hold no data; ``DLFP_PROTECT_DOCS`` puts them behind an API key as well.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)

# NOTE: the page must stay same-origin only; this policy makes the browser enforce it
# (and forbids inline scripts, so the script lives in its own file).
_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
)
_HEADERS = {"Cache-Control": "no-store", "Content-Security-Policy": _CSP}


def _static(name: str) -> str:
    return files("gateway").joinpath("static", name).read_text(encoding="utf-8")


# Plain ``def``: FastAPI runs it in the thread pool, so the file read never blocks the loop.
@router.get("/dashboard")
def dashboard() -> Response:
    return Response(_static("dashboard.html"), media_type="text/html", headers=_HEADERS)


@router.get("/dashboard/dashboard.js")
def dashboard_script() -> Response:
    return Response(_static("dashboard.js"), media_type="text/javascript", headers=_HEADERS)
