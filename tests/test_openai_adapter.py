"""The OpenAI-compatible adapter: chat completions recognised, limited as openai:<model>,
accounted from replies and streams, priced, and its 429s mapped; over a real HTTP server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import redis
from http_scripted import Reply, ScriptedServer

from agentfleet.config import load_settings, reset_settings
from agentfleet.errors import RateLimited, SpendLimitReached
from agentfleet.llm.openai import OpenAIAdapter, parse_reset
from agentfleet.ratelimit import Limiter
from agentfleet.tasks import clients
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import new_context

MODEL = "gpt-4o-mini"
PATH = "/v1/chat/completions"
PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.6, "cache_read_per_mtok": 0.075}


def test_a_chat_completion_is_recognised_with_its_estimate_and_output_cap() -> None:
    body = {"model": MODEL, "max_completion_tokens": 40, "messages": [{"role": "user", "content": "x" * 400}]}
    call = OpenAIAdapter(["llm.internal"]).describe("POST", "llm.internal", PATH, json.dumps(body).encode())
    assert call is not None
    assert (call.downstream, call.model, call.output_tokens) == (f"openai:{MODEL}", MODEL, 40)
    assert 100 <= call.input_tokens <= 130, "about four characters a token"
    assert OpenAIAdapter().describe("POST", "llm.internal", PATH, json.dumps(body).encode()) is None


def test_usage_keeps_cached_prompt_tokens_apart() -> None:
    usage = OpenAIAdapter().reply_usage(
        {
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 60},
            }
        }
    )
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (40, 60, 7)
    assert usage.total_input == 100


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("soon", None)])
def test_reset_durations(text: str, seconds: float | None) -> None:
    assert parse_reset(text) == seconds


def test_a_quota_429_is_a_spend_limit_not_a_wait() -> None:
    body = json.dumps({"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}})
    err = OpenAIAdapter().error_for_response(429, {}, body, MODEL)
    assert isinstance(err, SpendLimitReached) and err.downstream == f"openai:{MODEL}"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture
def ctx(
    server: ScriptedServer, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TaskContext]:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_LLM__OPENAI_BASE_URL", server.url("/v1"))
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1"]')
    monkeypatch.setenv("AGENTFLEET_LIMITS", json.dumps({f"openai:{MODEL}": {"input_tokens_per_min": 6000}}))
    monkeypatch.setenv("AGENTFLEET_LLM__PRICES", json.dumps({MODEL: PRICE}))
    reset_settings()
    made = new_context(
        task_id="t-openai",
        run_id="r",
        item_key="i",
        idempotency_key="k",
        attempt=0,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
        http_factory=clients.http_client,
    )
    yield made
    made.close()


def _bucket_used(redis_client: redis.Redis) -> float:
    limiter = Limiter.from_settings(load_settings(), redis_client)
    [bucket] = limiter.status(f"openai:{MODEL}").buckets
    return bucket.capacity - bucket.tokens


def test_a_reply_is_limited_under_its_model_reconciled_and_priced(
    ctx: TaskContext, server: ScriptedServer, redis_client: redis.Redis
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 0}}
    server.script(PATH, Reply(200, {"choices": [{"message": {"content": "ok"}}], "usage": usage}))
    body = {"model": MODEL, "max_tokens": 500, "messages": [{"role": "user", "content": "hello"}]}
    assert ctx.http.post(server.url(PATH), json=body).json()["choices"][0]["message"]["content"] == "ok"
    assert len(server.hits(PATH)) == 1
    assert ctx.downstreams_called == (f"openai:{MODEL}",)
    assert ctx.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.6) / 1e6)
    assert (ctx.input_tokens, ctx.output_tokens) == (1000, 200)
    # Charged a few tokens' estimate up front, then settled to the 1,000 the reply reported
    # (less what the bucket refilled since, at 100 tokens a second).
    assert 900 < _bucket_used(redis_client) <= 1000


def test_a_stream_that_asked_for_usage_is_accounted_from_its_last_chunk(
    ctx: TaskContext, server: ScriptedServer
) -> None:
    chunks = [
        {"choices": [{"delta": {"content": "o"}}], "usage": None},
        {"choices": [{"delta": {"content": "k"}}], "usage": None},
        {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 2}},
    ]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    server.script(PATH, Reply(200, sse, headers={"content-type": "text/event-stream"}))
    body = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "messages": []}
    with ctx.http.stream("POST", server.url(PATH), json=body) as response:
        response.read()
    assert (ctx.input_tokens, ctx.output_tokens) == (30, 2)
    assert ctx.cost_usd == pytest.approx((30 * 0.15 + 2 * 0.6) / 1e6)


def test_a_429_raises_with_the_reset_wait_and_pauses_the_model_for_every_worker(
    ctx: TaskContext, server: ScriptedServer, redis_client: redis.Redis
) -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6s"}
    server.script(
        PATH, Reply(429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, headers)
    )
    body = {"model": MODEL, "max_tokens": 5, "messages": []}
    with pytest.raises(RateLimited) as caught:
        ctx.http.post(server.url(PATH), json=body)
    assert caught.value.retry_after_s == 6.0
    assert caught.value.downstream == f"openai:{MODEL}"
    limiter = Limiter.from_settings(load_settings(), redis_client)
    assert limiter.status(f"openai:{MODEL}").paused_for_s > 0
