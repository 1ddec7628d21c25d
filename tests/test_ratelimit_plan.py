"""Downstream names and concurrency planning."""

from __future__ import annotations

import pytest

from agentfleet.errors import BadRequest, ConfigError
from agentfleet.ratelimit import concurrency_plan, downstream_for, llm_downstream


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://API.Vendor-A.example:8443/v1/items?q=1", "api.vendor-a.example"),
        ("http://127.0.0.1:9000/", "127.0.0.1"),
        ("vendor-a.example", "vendor-a.example"),
        ("Vendor-A.example:443", "vendor-a.example"),
        ("vendor-a.example.", "vendor-a.example"),
        ("http://[::1]:8080/x", "::1"),
    ],
)
def test_downstream_is_the_lowercased_host(given: str, expected: str) -> None:
    assert downstream_for(given) == expected


@pytest.mark.parametrize("given", ["", "/relative/path", "http://"])
def test_a_url_without_a_host_is_refused(given: str) -> None:
    with pytest.raises(BadRequest):
        downstream_for(given)


def test_llm_downstreams_are_provider_and_model() -> None:
    assert llm_downstream("claude-haiku-4-5") == "anthropic:claude-haiku-4-5"
    assert llm_downstream("gpt-x", provider="OpenAI") == "openai:gpt-x"


def test_concurrency_is_rate_times_latency_plus_headroom() -> None:
    assert concurrency_plan(10, 2).concurrency == 24
    assert concurrency_plan(10, 2, headroom=0).concurrency == 20
    assert concurrency_plan(10, 0.3, headroom=0).concurrency == 3
    assert concurrency_plan(0.1, 1).concurrency == 1


def test_the_plan_explains_itself() -> None:
    plan = concurrency_plan(60, 2)
    assert plan.in_flight == 120
    assert plan.concurrency == 144
    # Without a rate bucket the cap alone must stay under the rate: 120 / 1.2.
    assert plan.cap_only_concurrency == 100
    assert "Little's law" in plan.explain()
    assert plan.as_dict()["concurrency"] == 144


@pytest.mark.parametrize(("rps", "latency_s", "headroom"), [(0, 1, 0.2), (1, -1, 0.2), (1, 1, -0.1)])
def test_a_plan_refuses_nonsense(rps: float, latency_s: float, headroom: float) -> None:
    with pytest.raises(ConfigError):
        concurrency_plan(rps, latency_s, headroom)
