"""Reading the server's /metrics: histogram deltas, bucket quantiles, gauges."""

from __future__ import annotations

from voxpipe.loadtest.load import buffer_ages
from voxpipe.loadtest.scrape import Histogram, gauge, histograms, http_base

PAGE = """# HELP voxpipe_buffer_age_seconds How long audio waited.
# TYPE voxpipe_buffer_age_seconds histogram
voxpipe_buffer_age_seconds_bucket{direction="inbound",le="0.01"} {a}
voxpipe_buffer_age_seconds_bucket{direction="inbound",le="0.1"} {b}
voxpipe_buffer_age_seconds_bucket{direction="inbound",le="+Inf"} {b}
voxpipe_buffer_age_seconds_count{direction="inbound"} {b}
voxpipe_buffer_age_seconds_sum{direction="inbound"} {s}
# HELP voxpipe_resident_memory_bytes Resident memory of the server process.
# TYPE voxpipe_resident_memory_bytes gauge
voxpipe_resident_memory_bytes 1.5e+09
"""


def page(a: int, b: int, s: float) -> str:
    return PAGE.replace("{a}", str(a)).replace("{b}", str(b)).replace("{s}", str(s))


def test_histogram_parse_and_quantile() -> None:
    series = histograms(page(50, 100, 2.0), "voxpipe_buffer_age_seconds", "direction")
    inbound = series["inbound"]
    assert inbound.count == 100 and inbound.sum == 2.0
    assert inbound.quantile(0.5) == 0.01  # exactly the first bucket's top
    q99 = inbound.quantile(0.99)
    assert q99 is not None and abs(q99 - (0.01 + 0.09 * 49 / 50)) < 1e-9


def test_the_step_share_is_the_difference_of_two_scrapes() -> None:
    ages = buffer_ages(page(10, 10, 0.05), page(10, 20, 0.55))
    assert ages["inbound"]["n"] == 10
    assert ages["inbound"]["mean"] == 50.0  # (0.55 - 0.05) / 10 s, in ms
    assert ages["inbound"]["p50"] == 55.0  # midway through the 10-100 ms bucket
    assert buffer_ages("", "") == {}


def test_overflow_bucket_reports_the_last_finite_bound() -> None:
    h = Histogram({0.1: 0.0, float("inf"): 4.0}, count=4, sum=10.0)
    assert h.quantile(0.99) == 0.1
    assert Histogram().quantile(0.5) is None
    assert Histogram().summary_ms() == {"n": 0}


def test_gauge_and_base_url() -> None:
    assert gauge(page(1, 1, 0.0), "voxpipe_resident_memory_bytes") == 1.5e9
    assert gauge(page(1, 1, 0.0), "voxpipe_missing") is None
    assert http_base("ws://127.0.0.1:8765/v1/voice?x=1") == "http://127.0.0.1:8765"
    assert http_base("wss://voice.example/v1/voice") == "https://voice.example"
