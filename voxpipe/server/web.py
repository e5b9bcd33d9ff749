"""The browser page: ``/`` gives a browser the page, an API client the JSON it always got.

The page is plain static files in ``voxpipe/web/`` (ES modules, no build step), so
what the browser runs is what is in the repository and in the wheel.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
STATIC_PATH = "/web"  # where the page's scripts and styles are served

# The page's modules change with the server; a stale cached module would talk an old protocol.
_NO_STALE = {"Cache-Control": "no-cache"}


def _quality(accept: str, media_type: str) -> float:
    """The q-value ``accept`` gives ``media_type``: the most specific matching range wins."""
    main = media_type.split("/", 1)[0]
    best, best_rank = 0.0, -1
    for part in accept.split(","):
        kind, *params = (p.strip() for p in part.split(";"))
        rank = 2 if kind == media_type else 1 if kind == f"{main}/*" else 0 if kind == "*/*" else -1
        if rank < 0 or rank < best_rank:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best, best_rank = q, rank
    return best


def wants_html(accept: str) -> bool:
    """True when the client prefers HTML to JSON; a tie (``*/*``, no header) keeps JSON."""
    return _quality(accept, "text/html") > _quality(accept, "application/json")


def page() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html", headers=_NO_STALE)


class WebFiles(StaticFiles):
    """The page's static files, revalidated on every load (see ``_NO_STALE``)."""

    def __init__(self) -> None:
        super().__init__(directory=WEB_DIR)

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(_NO_STALE)
        if str(full_path).endswith(".js"):
            # Browsers refuse ES modules of any other type, and OS MIME maps vary.
            response.headers["content-type"] = "text/javascript; charset=utf-8"
        return response
