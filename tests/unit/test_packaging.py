"""The wheel holds ``voxpipe`` alone: the research benchmarks run from a checkout, never ship.

Read from ``pyproject.toml``'s package discovery, so no wheel is built. The same list, built:
``pip wheel --no-deps -w /tmp/wheel . && python -m zipfile -l /tmp/wheel/voxpipe-*.whl``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parents[2]


def wheel_packages() -> list[str]:
    """The packages setuptools puts into the wheel, found as ``packages.find`` says."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    find = setuptools["packages"]["find"]
    assert find.get("namespaces", True), "pyproject's find is find_namespace_packages"
    found: list[str] = []
    for where in find.get("where", ["."]):
        found += find_namespace_packages(
            where=str(ROOT / where), include=find["include"], exclude=find.get("exclude", ())
        )
    return found


def test_the_wheel_holds_voxpipe_alone() -> None:
    packages = wheel_packages()
    assert {package.split(".")[0] for package in packages} == {"voxpipe"}


def test_the_wheel_holds_every_voxpipe_package() -> None:
    packages = set(wheel_packages())
    inits = ROOT.glob("voxpipe/**/__init__.py")
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in inits}
    assert on_disk <= packages
