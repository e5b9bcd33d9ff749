"""The metrics the alerts and the dashboard need, on the registry ``/metrics`` serves."""

from __future__ import annotations

from voxpipe.observability.metrics import Metrics


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_process_memory_is_on_the_served_registry() -> None:
    metrics = Metrics()
    metrics.sample_process()
    page = metrics.render().decode()
    assert "\nprocess_resident_memory_bytes " in page
    assert (value(metrics, "voxpipe_resident_memory_bytes") or 0) > 0


def test_connections_reconnects_and_refusals_are_counted_by_their_labels() -> None:
    metrics = Metrics()
    version = metrics.client_version("web/1.4.2")
    metrics.count_connection("native", "accepted", version)
    metrics.count_connection("native", "accepted", version)
    metrics.count_reconnect("native", version)
    metrics.upstream_refused("llm", "429")
    accepted = {"transport": "native", "outcome": "accepted", "client_version": "web/1.4.2"}
    assert value(metrics, "voxpipe_connections_total", **accepted) == 2
    assert (
        value(metrics, "voxpipe_reconnects_total", transport="native", client_version="web/1.4.2")
        == 1
    )
    assert value(metrics, "voxpipe_upstream_refusals_total", engine="llm", reason="429") == 1


def test_client_voice_to_voice_is_labelled_by_the_client_name() -> None:
    metrics = Metrics()
    metrics.observe_client_voice_to_voice("native", metrics.client_version("web/1.4.2"), 0.8)
    metrics.observe_client_voice_to_voice("twilio", metrics.client_version(None), -0.1)
    native = {"transport": "native", "client": "web"}
    assert value(metrics, "voxpipe_client_voice_to_voice_seconds_sum", **native) == 0.8
    unknown = {"transport": "twilio", "client": "unknown"}
    assert value(metrics, "voxpipe_client_voice_to_voice_seconds_sum", **unknown) == 0.0
