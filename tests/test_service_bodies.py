"""``POST /runs`` refuses bad bodies cleanly: 413 over the size cap, 422 when nested too deeply,
never a 500; every error the service answers is a JSON object with one message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.service import create_app

RIGHT = "right-token-" + "0" * 32

CAP = 1024 * 1024
AUTH = {"Authorization": f"Bearer {RIGHT}", "Content-Type": "application/json"}


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        service={"token": RIGHT, "max_body_bytes": CAP, "max_json_depth": 16},
        fanouts={"echoes": {"task": "fleet_test_tasks.echo"}},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _one_message(response: object) -> str:
    body = response.json()  # type: ignore[attr-defined]
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"]
    return str(body["error"])


@pytest.mark.parametrize("depth", [17, 1_000, 100_000])
def test_json_nested_too_deeply_is_422(client: TestClient, depth: int) -> None:
    inner = "[" * depth + "]" * depth
    body = f'{{"fanout": "echoes", "inputs": [{{"n": {inner}}}]}}'
    if len(body) > 64 * 1024:
        body = inner  # the nesting alone; still under no other limit than depth
    response = client.post(
        "/runs", content=body[: 64 * 1024 - 1] if len(body) >= 64 * 1024 else body, headers=AUTH
    )
    assert response.status_code == 422
    assert "max_json_depth" in _one_message(response)


def test_nesting_within_the_limit_is_accepted_past_the_body_checks(client: TestClient) -> None:
    inner = "[" * 10 + "]" * 10
    body = f'{{"fanout": "nope", "inputs": [{{"n": {inner}}}]}}'
    response = client.post("/runs", content=body, headers=AUTH)
    assert response.status_code == 404, "the unknown fan-out is the first thing wrong with it"


def test_a_body_over_the_cap_is_413_by_its_declared_length(client: TestClient) -> None:
    response = client.post("/runs", content=b"x" * (CAP + 1), headers=AUTH)
    assert response.status_code == 413
    assert "max_body_bytes" in _one_message(response)


def test_a_streamed_body_over_the_cap_is_413(client: TestClient) -> None:
    chunks = iter([b'{"fanout": "echoes", "inputs": [', b"{}," * (CAP // 3), b"{}]}"])
    response = client.post("/runs", content=chunks, headers=AUTH)
    assert response.status_code == 413
    _one_message(response)


@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe", b'{"fanout": "echoes", "inputs": {"n": 1}}', b"[]", b"null"]
)
def test_other_bad_bodies_are_422_with_one_message(client: TestClient, body: bytes) -> None:
    response = client.post("/runs", content=body, headers=AUTH)
    assert response.status_code == 422
    _one_message(response)


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/nowhere", 404), ("DELETE", "/runs", 405), ("PUT", "/runs", 405)]
)
def test_unknown_routes_and_methods_answer_json(
    client: TestClient, method: str, path: str, status: int
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    _one_message(response)


def test_an_unexpected_failure_is_a_json_500_without_details(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("internal detail: redis://:hunter2@x")

    monkeypatch.setattr("agentfleet.service.run_routes.start_for_caller", broken)
    response = client.post("/runs", json={"fanout": "echoes"}, headers=AUTH)
    assert response.status_code == 500
    assert "hunter2" not in _one_message(response)
