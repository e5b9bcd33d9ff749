"""``python -m voxpipe.cli`` (how the supervisor starts its workers) runs ``main()`` at the
module's ``if __name__ == "__main__"`` guard: anything defined after it does not exist yet
when the server calls it (a worker's readiness banner once failed with a NameError)."""

from __future__ import annotations

import ast
from pathlib import Path

import voxpipe.cli


def test_the_main_guard_is_the_module_s_last_statement() -> None:
    tree = ast.parse(Path(voxpipe.cli.__file__).read_text())
    last = tree.body[-1]
    assert isinstance(last, ast.If) and "__main__" in ast.unparse(last.test)
    guards = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert guards == [last]
