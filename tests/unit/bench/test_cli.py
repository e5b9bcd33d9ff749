"""``python -m bench``: every benchmark is a command of its own, and none is a ``voxpipe`` one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import build_parser
from voxpipe.cli import build_parser as product_parser

COMMANDS = ["caller", "conversation", "transports", "cluster", "stt", "tool-eval", "tool-turns"]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_benchmark_has_a_command(command: str) -> None:
    args = build_parser().parse_args([command])
    assert args.func.__name__ == f"cmd_{command.replace('-', '_')}"
    assert isinstance(args.out, Path) and args.out.parts[0] == "bench-results"


@pytest.mark.parametrize("command", ["bench", *(f"bench-{c}" for c in COMMANDS)])
def test_the_product_cli_has_no_benchmark(command: str) -> None:
    with pytest.raises(SystemExit):
        product_parser().parse_args([command])


def test_the_operator_commands_stay_in_the_product() -> None:
    assert product_parser().parse_args(["load"]).func.__name__ == "cmd_load"
    assert product_parser().parse_args(["cluster"]).func.__name__ == "cmd_cluster"


def test_runs_as_a_module() -> None:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert all(command in done.stdout for command in COMMANDS)
