"""The shipped nginx config logs no query string: credentials travel in it (?api_key=, ?token=)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from voxpipe.server.local_cluster import NGINX, render_nginx

# nginx variables that hold the raw query string or a credential header.
LEAKY = ("$request", "$request_uri", "$args", "$query_string", "$http_authorization")


def rendered(tmp_path: Path) -> str:
    return render_nginx("127.0.0.1:9000", ["127.0.0.1:9001", "127.0.0.1:9002"], tmp_path)


def test_the_access_log_has_the_path_without_the_query(tmp_path: Path) -> None:
    conf = rendered(tmp_path)
    formats = re.findall(r"log_format\s+\w+\s+(.*?);", conf, re.DOTALL)
    assert formats, "the access log names its format"
    for fmt in formats:
        variables = set(re.findall(r"\$\w+", fmt))
        assert not variables & set(LEAKY), fmt
        assert not [v for v in variables if v.startswith(("$arg_", "$cookie_"))], fmt
    for line in re.findall(r"^\s*access_log\s+[^;]*;", conf, re.MULTILINE):
        assert line.split()[-1].rstrip(";") == "voxpipe", f"{line}: nginx's combined has $request"


def test_the_error_log_leaves_out_request_lines(tmp_path: Path) -> None:
    """nginx quotes the request line in every error about a request (a refused upstream
    during failover): only crit and above, which carry none, are kept."""
    (level,) = re.findall(r"^error_log\s+\S+\s+(\w+);", rendered(tmp_path), re.MULTILINE)
    assert level in ("crit", "alert", "emerg")


@pytest.mark.skipif(shutil.which(NGINX) is None and not Path(NGINX).exists(), reason="no nginx")
def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    conf.write_text(rendered(tmp_path))
    result = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
