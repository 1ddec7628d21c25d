"""``agentfleet mcp --transport http``: every request must show the service token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from agentfleet.config import load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.service.mcp_server import MCP_PATH, FleetTools, build_server, http_app

TOKEN = "mcp-http-token-" + "0" * 32
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def fleet(redis_url: str, key_prefix: str) -> Iterator[Fleet]:
    with Fleet(load_settings(broker_url=redis_url, key_prefix=key_prefix, service={"token": TOKEN})) as made:
        yield made


@pytest.fixture
def client(fleet: Fleet) -> Iterator[TestClient]:
    tools = FleetTools(fleet)
    server = build_server(tools, http_base_url="http://127.0.0.1:8766")
    with TestClient(
        http_app(server, host="127.0.0.1", tools=tools), base_url="http://127.0.0.1:8766"
    ) as test_client:
        yield test_client


def test_a_request_without_the_token_is_refused(client: TestClient) -> None:
    assert client.post(MCP_PATH, json=INITIALIZE, headers=HEADERS).status_code == 401
    wrong = {**HEADERS, "Authorization": "Bearer not-it"}
    assert client.post(MCP_PATH, json=INITIALIZE, headers=wrong).status_code == 401


def test_a_request_with_the_token_is_served(client: TestClient) -> None:
    response = client.post(MCP_PATH, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert '"name":"agentfleet"' in response.text.replace(" ", "")


def test_http_without_a_service_token_does_not_start(redis_url: str, key_prefix: str) -> None:
    settings = load_settings(broker_url=redis_url, key_prefix=key_prefix)
    with Fleet(settings) as fleet, pytest.raises(DispatchError, match="AGENTFLEET_SERVICE__TOKEN"):
        build_server(FleetTools(fleet), http_base_url="http://127.0.0.1:8766")
