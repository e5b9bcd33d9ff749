"""``/`` serves the browser page to browsers and JSON to API clients; the page's files are
served, with types a browser accepts for ES modules and worklets."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from tests.unit.fakes import fake_engines
from voxpipe.config import Config
from voxpipe.server.app import create_app
from voxpipe.server.web import WEB_DIR, wants_html

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


@pytest.fixture
def client() -> TestClient:
    config = Config.load(server={"turn_log_path": None}, store={"path": None})
    return TestClient(create_app(config, fake_engines))  # no lifespan: no models load


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (BROWSER, True),
        ("text/html", True),
        ("application/json", False),
        ("*/*", False),  # curl, httpx: the JSON they always got
        ("", False),
        ("application/json, text/html;q=0.5", False),
        ("text/*;q=0.9, application/json;q=0.5", True),
        ("text/html;q=0, */*", False),
        ("text/html;q=oops, application/json;q=0.1", False),  # a malformed q counts as 0
    ],
)
def test_content_negotiation(accept: str, html: bool) -> None:
    assert wants_html(accept) is html


def test_a_browser_gets_the_page(client: TestClient) -> None:
    response = client.get("/", headers={"accept": BROWSER})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="web/app.js">' in response.text


def test_an_api_client_gets_json(client: TestClient) -> None:
    for accept in ("application/json", "*/*"):
        response = client.get("/", headers={"accept": accept})
        assert response.status_code == 200
        body = response.json()
        assert body["service"] == "voxpipe"
        assert body["voice"].endswith("/v1/voice")


def test_every_file_the_page_loads_is_served(client: TestClient) -> None:
    page = (WEB_DIR / "index.html").read_text()
    referenced = set(re.findall(r'(?:src|href)="(web/[^"]+)"', page))
    for module in WEB_DIR.glob("*.js"):
        imports = re.findall(r'from "\./([^"]+)"', module.read_text())
        referenced |= {f"web/{name}" for name in imports}
    assert {"web/app.js", "web/style.css", "web/protocol.js"} <= referenced
    assert "worklet.js" in (WEB_DIR / "audio.js").read_text()
    referenced.add("web/worklet.js")
    for path in sorted(referenced):
        response = client.get(f"/{path}")
        assert response.status_code == 200, path
        kind = response.headers["content-type"]
        expected = "text/css" if path.endswith(".css") else "text/javascript"
        assert kind.startswith(expected), (path, kind)
        assert response.headers["cache-control"] == "no-cache"
    assert client.get("/web/missing.js").status_code == 404
    assert client.get("/web/../server/app.py").status_code == 404
