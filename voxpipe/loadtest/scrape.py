"""What the load generator reads from the server itself: ``/metrics`` and its memory.

Histograms on ``/metrics`` are cumulative over the server's life, so a step's
share is the difference of two scrapes; its percentiles are estimated from
the buckets the way Prometheus's ``histogram_quantile`` does (linear within a
bucket), good to a bucket's width.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0


def http_base(ws_url: str) -> str:
    """``ws://host:port/v1/voice`` -> ``http://host:port``."""
    parts = urlsplit(ws_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return f"{scheme}://{parts.netloc}"


@dataclass
class Histogram:
    """One labelled series of a Prometheus histogram: cumulative bucket counts by ``le``."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float = 0.0
    sum: float = 0.0

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        return Histogram(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.count - before.count,
            self.sum - before.sum,
        )

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile, interpolated within its bucket; None when empty."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower_le, lower_n = 0.0, 0.0
        for le, n in sorted(self.buckets.items()):
            if n >= rank:
                if math.isinf(le):
                    return lower_le  # beyond the last finite bucket: its bound is all we know
                width = n - lower_n
                return lower_le + (le - lower_le) * ((rank - lower_n) / width if width else 1.0)
            lower_le, lower_n = le, n
        return lower_le

    def summary_ms(self) -> dict[str, float]:
        """n, p50, p95, p99, mean in milliseconds (bucket estimates)."""
        if self.count <= 0:
            return {"n": 0}
        out: dict[str, float] = {"n": int(self.count)}
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            value = self.quantile(q)
            if value is not None:
                out[name] = round(value * 1000, 1)
        out["mean"] = round(self.sum / self.count * 1000, 1)
        return out


def histograms(text: str, name: str, label: str) -> dict[str, Histogram]:
    """The series of histogram ``name`` in a ``/metrics`` page, keyed by ``label``'s value."""
    out: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            key = sample.labels.get(label, "")
            series = out.setdefault(key, Histogram())
            if sample.name == f"{name}_bucket":
                series.buckets[float(sample.labels["le"])] = sample.value
            elif sample.name == f"{name}_count":
                series.count = sample.value
            elif sample.name == f"{name}_sum":
                series.sum = sample.value
    return out


def gauge(text: str, name: str) -> float | None:
    """The (first) value of gauge ``name`` in a ``/metrics`` page."""
    for family in text_string_to_metric_families(text):
        if family.name == name and family.samples:
            return float(family.samples[0].value)
    return None


def counter(text: str, name: str, **labels: str) -> float:
    """A counter's value on a ``/metrics`` page (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def scrape(base: str) -> str:
    """The server's ``/metrics`` page, or "" when it cannot be read."""
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S) as http:
            response = await http.get(f"{base}/metrics")
            if response.status_code == 200:
                return response.text
    return ""


class MemorySampler:
    """Samples the server's resident memory while a step runs: by pid through psutil when
    the load generator started the server, else from the ``voxpipe_resident_memory_bytes``
    gauge on ``/metrics``."""

    def __init__(self, pid: int | None, base: str, interval_s: float = 0.5) -> None:
        self.pid = pid
        self.base = base
        self.interval_s = interval_s
        self.source = "psutil" if pid is not None else "metrics"
        self.baseline: float | None = None
        self.peak: float | None = None
        self.samples: list[tuple[float, float]] = []  # (seconds since start, bytes)
        self._task: asyncio.Task[None] | None = None
        self._origin = time.monotonic()

    async def sample(self) -> float | None:
        if self.pid is not None:
            pid = self.pid
            with contextlib.suppress(psutil.Error):
                rss = await asyncio.to_thread(lambda: psutil.Process(pid).memory_info().rss)
                return float(rss)
            return None
        text = await scrape(self.base)
        return gauge(text, "voxpipe_resident_memory_bytes") if text else None

    async def _record(self) -> float | None:
        value = await self.sample()
        if value is not None:
            self.samples.append((round(time.monotonic() - self._origin, 2), value))
            self.peak = value if self.peak is None else max(self.peak, value)
        return value

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._record()

    async def __aenter__(self) -> MemorySampler:
        self._origin = time.monotonic()
        self.baseline = await self._record()
        self._task = asyncio.create_task(self._loop(), name="memory-sampler")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._record()
