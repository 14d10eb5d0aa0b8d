"""The Prometheus metrics as the tests read them: a scrape parsed into its samples."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.observability.metrics_scrape import CONTENT_TYPE

#: The endpoint label of DELETE /token/<token>: its rule, never the token.
REVOKE_RULE = "/token/<any_text:refresh_token>"


def parse(text: str) -> dict[tuple, float]:
    """Return {(sample name, sorted labels): value} of a Prometheus text exposition."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client) -> dict[tuple, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return parse(response.get_data(as_text=True))


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests_of(samples, endpoint: str, method: str, status: int) -> float:
    return value(
        samples,
        "token_service_http_requests_total",
        endpoint=endpoint,
        method=method,
        status=str(status),
    )
