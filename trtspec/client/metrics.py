"""The server's Prometheus metrics: fetched from the metrics port, parsed into samples, summed."""

from __future__ import annotations

from trtspec.errors import ServerError


def fetch_metrics(metrics_url: str) -> dict[str, float]:
    """Prometheus text from `metrics_url` as {'name{label="v",...}': value}."""
    import urllib.request

    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            return parse_prometheus(response.read().decode())
    except OSError as error:
        raise ServerError(f"{metrics_url}: metrics not reachable ({error})",
                          fix="pass the metrics port (serve.metrics_port)") from None


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of a Prometheus text exposition: 'name{labels}' (labels as written) -> value."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            samples[key.strip()] = float(value)
        except ValueError:
            continue
    return samples


def metric_total(samples: dict[str, float], name: str) -> float:
    """Sum of every sample of metric `name` over its labels."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))
