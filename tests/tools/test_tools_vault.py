"""The credential vault through the guard: injection, domain rules, leaks, and the audit stream."""

from __future__ import annotations

import json
import socket
import time
import traceback
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis_contents import all_contents
from tool_servers import Server

from agentfleet.config import CredentialSpec, FetchSettings
from agentfleet.errors import ConfigError, ConnectionFailed, ForbiddenDestination
from agentfleet.tools.audit import AuditLog
from agentfleet.tools.fetch import http_fetch
from agentfleet.tools.guard import httpx_guard
from agentfleet.tools.vault import (
    CredentialVault,
    domain_allows,
    normalize_domain_rule,
    placeholder,
    references,
)

LOCAL = FetchSettings(allow_private_hosts=["127.0.0.1"], timeout_s=5)


@pytest.fixture
def secret() -> str:
    return f"sk-canary-{uuid.uuid4().hex}"


@pytest.fixture
def audit(redis_client: redis.Redis, key_prefix: str) -> AuditLog:
    return AuditLog(redis_client, key_prefix)


def _vault(secret: str, audit: AuditLog | None, *domains: str, **more: str) -> CredentialVault:
    specs = {"vendor_a": CredentialSpec(env="VENDOR_A_KEY", domains=list(domains))}
    environ = {"VENDOR_A_KEY": secret}
    for name, value in more.items():
        specs[name] = CredentialSpec(env=name.upper(), domains=list(domains))
        environ[name.upper()] = value
    return CredentialVault(specs, audit=audit, environ=environ)


def _client(vault: CredentialVault, task_id: str = "task-1", **kwargs: Any) -> httpx.Client:
    kwargs.setdefault("settings", LOCAL)
    transport = httpx_guard(vault=vault, task_id=task_id, **kwargs)
    return httpx.Client(transport=transport, trust_env=False, timeout=5)


def _leaks(exc: BaseException, secret: str) -> list[str]:
    """Every place the secret shows up in an error: text, repr, request, traceback locals."""
    found: list[str] = []
    texts = {
        "str": str(exc),
        "repr": repr(exc),
        "formatted": "".join(traceback.format_exception(exc)),
    }
    request = getattr(exc, "_request", None)
    if request is not None:
        texts["request"] = f"{request!r} {request.url} {request.headers!r}"
    for where, text in texts.items():
        if secret in text:
            found.append(where)
    current: BaseException | None = exc
    while current is not None:
        tb = current.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == __file__:
                # The test's own frame knows the secret, naturally.
                tb = tb.tb_next
                continue
            for name, value in tb.tb_frame.f_locals.items():
                shown = repr(value)
                if isinstance(value, httpx.Request):
                    shown += f" {value.url} {value.headers.raw!r}"
                if secret in shown:
                    found.append(f"frame {tb.tb_frame.f_code.co_name} local {name}")
            tb = tb.tb_next
        current = current.__cause__ or current.__context__
    return found


def test_the_secret_reaches_only_the_wire(canary: Server, secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "127.0.0.1")
    with _client(vault) as client:
        response = client.get(
            canary.url("/v1/items?key=$CRED{vendor_a}"),
            headers={"X-Api-Key": "$CRED{vendor_a}", "Authorization": "Bearer $CRED{vendor_a}"},
        )
    assert response.status_code == 200
    hit = canary.hits[0]
    assert hit.headers["X-Api-Key"] == secret
    assert hit.headers["Authorization"] == f"Bearer {secret}"
    assert hit.path == f"/v1/items?key={secret}"
    # What the task can see still holds the placeholder.
    seen = response.request
    assert seen.headers["X-Api-Key"] == "$CRED{vendor_a}"
    assert secret not in f"{seen!r} {seen.url} {seen.headers!r}"


def test_an_encoded_placeholder_is_filled_and_the_value_encoded(canary: Server, audit: AuditLog) -> None:
    vault = _vault("a b&c/d", audit, "127.0.0.1")
    with _client(vault) as client:
        client.get(canary.url("/q"), params={"token": "$CRED{vendor_a}"})
    assert canary.hits[0].path == "/q?token=a%20b%26c%2Fd"


def test_refused_for_a_domain_it_is_not_allowed_for(canary: Server, secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "api.vendor-a.example", "*.vendor-a.example")
    with _client(vault) as client, pytest.raises(ForbiddenDestination) as caught:
        client.get(canary.url("/"), headers={"X-Api-Key": "$CRED{vendor_a}"})
    assert "vendor_a" in caught.value.message and "127.0.0.1" in caught.value.message
    assert secret not in str(caught.value)
    assert canary.hits == []
    assert audit.read() == []


class Wire(httpx.BaseTransport):
    """Records wire requests, or fails with a message quoting them, as some libraries do."""

    def __init__(self, fail: bool = False, body_fails: bool = False) -> None:
        self.sent: list[httpx.Request] = []
        self._fail = fail
        self._body_fails = body_fails

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        if self._fail:
            raise httpx.ConnectError(f"cannot send {request.url} with {request.headers.raw!r}")
        if self._body_fails:
            return httpx.Response(200, stream=_BrokenBody(request))
        return httpx.Response(200, text="ok")


class _BrokenBody(httpx.SyncByteStream):
    def __init__(self, request: httpx.Request) -> None:
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        yield b"partial"
        raise httpx.ReadError(f"connection reset while reading for {self._request.url}")


def _public(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


def test_plain_http_is_refused_for_a_public_host(secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "api.vendor-a.example")
    wire = Wire()
    with _client(vault, resolver=_public, transport_factory=lambda: wire) as client:
        with pytest.raises(ForbiddenDestination, match="https"):
            client.get("http://api.vendor-a.example/", headers={"X-Key": "$CRED{vendor_a}"})
        assert wire.sent == []
        client.get("https://API.Vendor-A.example./", headers={"X-Key": "$CRED{vendor_a}"})
    assert wire.sent[0].headers["X-Key"] == secret
    assert [(e.credential, e.domain) for e in audit.read()] == [("vendor_a", "api.vendor-a.example")]


def test_an_error_during_the_send_carries_no_secret(secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "api.vendor-a.example")
    wire = Wire(fail=True)
    with (
        _client(vault, resolver=_public, transport_factory=lambda: wire) as client,
        pytest.raises(httpx.ConnectError) as caught,
    ):
        client.get(
            "https://api.vendor-a.example/x?k=$CRED{vendor_a}",
            headers={"X-Key": "$CRED{vendor_a}"},
        )
    assert secret in repr(wire.sent[0].headers.raw)  # the library's message did quote it
    error = caught.value
    assert _leaks(error, secret) == []
    assert "$CRED{vendor_a}" in str(error)
    assert error.__cause__ is None and error.__context__ is None
    assert error.request.headers["X-Key"] == "$CRED{vendor_a}"


def test_an_error_while_reading_the_body_carries_no_secret(secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "api.vendor-a.example")
    wire = Wire(body_fails=True)
    with (
        _client(vault, resolver=_public, transport_factory=lambda: wire) as client,
        pytest.raises(httpx.ReadError) as caught,
    ):
        client.get("https://api.vendor-a.example/r?k=$CRED{vendor_a}")
    assert _leaks(caught.value, secret) == []
    assert "$CRED{vendor_a}" in str(caught.value)


def test_a_real_connection_failure_carries_no_secret(secret: str, audit: AuditLog) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    vault = _vault(secret, audit, "127.0.0.1")
    url = f"http://127.0.0.1:{port}/x?k=$CRED{{vendor_a}}"
    with _client(vault) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            client.get(url, headers={"X-Key": "$CRED{vendor_a}"})
        assert _leaks(caught.value, secret) == []
        with pytest.raises(ConnectionFailed) as fetched:
            http_fetch(client, url, settings=LOCAL, headers={"X-Key": "$CRED{vendor_a}"})
        assert _leaks(fetched.value, secret) == []


def test_every_use_is_audited(canary: Server, secret: str, audit: AuditLog) -> None:
    vault = _vault(secret, audit, "127.0.0.1", vendor_b="other-secret")
    before = time.time()
    with _client(vault, task_id="task-42") as client:
        for _ in range(3):
            client.get(canary.url("/"), headers={"X-Api-Key": "$CRED{vendor_a}"})
        client.get(canary.url("/?b=$CRED{vendor_b}"), headers={"X-A": "$CRED{vendor_a}"})
        client.get(canary.url("/no-credentials"))
    entries = audit.read()
    assert [(e.task_id, e.credential, e.domain) for e in entries] == [
        ("task-42", "vendor_a", "127.0.0.1"),
        ("task-42", "vendor_a", "127.0.0.1"),
        ("task-42", "vendor_a", "127.0.0.1"),
        ("task-42", "vendor_b", "127.0.0.1"),
        ("task-42", "vendor_a", "127.0.0.1"),
    ]
    assert all(before - 1 <= e.time <= time.time() + 1 for e in entries)
    assert len(canary.hits) == 5


def test_no_audit_no_request(canary: Server, secret: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    vault = _vault(secret, AuditLog(dead, "x"), "127.0.0.1")
    with _client(vault) as client, pytest.raises(ConnectionFailed, match="audit"):
        client.get(canary.url("/"), headers={"X-Api-Key": "$CRED{vendor_a}"})
    assert canary.hits == []


def test_twenty_uses_leave_no_trace_in_redis(
    canary: Server, secret: str, audit: AuditLog, redis_client: redis.Redis
) -> None:
    vault = _vault(secret, audit, "127.0.0.1")
    with _client(vault) as client:
        for index in range(20):
            result = http_fetch(
                client,
                canary.url(f"/item/{index}?key=$CRED{{vendor_a}}"),
                settings=LOCAL,
                headers={"X-Api-Key": "$CRED{vendor_a}"},
                vault=vault,
            )
            assert secret not in result.model_dump_json()
    assert all(hit.headers["X-Api-Key"] == secret for hit in canary.hits)
    assert len(audit.read(count=100)) == 20
    assert not any(secret in value for value in all_contents(redis_client))


def test_a_value_echoed_by_the_server_is_scrubbed_from_the_result(canary: Server, secret: str) -> None:
    def echo(handler: BaseHTTPRequestHandler) -> None:
        body = f"you sent {handler.headers['X-Api-Key']}".encode()
        handler.send_response(200)
        handler.send_header("X-Echo", handler.headers["X-Api-Key"])
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    canary.routes["/echo"] = echo
    vault = _vault(secret, None, "127.0.0.1")
    with _client(vault) as client:
        result = http_fetch(
            client,
            canary.url("/echo"),
            settings=LOCAL,
            headers={"X-Api-Key": "$CRED{vendor_a}"},
            vault=vault,
        )
    assert result.text == "you sent $CRED{vendor_a}"
    assert result.headers["x-echo"] == "$CRED{vendor_a}"


def test_a_file_credential_is_read_at_each_use(canary: Server, tmp_path: Path) -> None:
    path = tmp_path / "vendor.key"
    path.write_text("first-value\n")
    spec = CredentialSpec(file=str(path), domains=["127.0.0.1"])
    vault = CredentialVault({"vendor_a": spec})
    with _client(vault) as client:
        client.get(canary.url("/"), headers={"X-Key": "$CRED{vendor_a}"})
        path.write_text("second-value")
        client.get(canary.url("/"), headers={"X-Key": "$CRED{vendor_a}"})
    assert [hit.headers["X-Key"] for hit in canary.hits] == ["first-value", "second-value"]


def test_a_missing_source_is_a_config_error_naming_it(canary: Server) -> None:
    spec = CredentialSpec(env="AF_SURELY_UNSET_VARIABLE", domains=["127.0.0.1"])
    vault = CredentialVault({"vendor_a": spec}, environ={})
    with _client(vault) as client, pytest.raises(ConfigError, match="AF_SURELY_UNSET_VARIABLE"):
        client.get(canary.url("/"), headers={"X-Key": "$CRED{vendor_a}"})
    assert canary.hits == []


def test_a_value_unfit_for_a_header_is_refused(canary: Server) -> None:
    vault = _vault("line\r\nX-Injected: 1", None, "127.0.0.1")
    with _client(vault) as client, pytest.raises(ConfigError, match="header"):
        client.get(canary.url("/"), headers={"X-Key": "$CRED{vendor_a}"})
    assert canary.hits == []


def test_unknown_names_and_a_missing_vault_are_refused(canary: Server, secret: str) -> None:
    with (
        _client(_vault(secret, None, "127.0.0.1")) as client,
        pytest.raises(ForbiddenDestination, match="not configured"),
    ):
        client.get(canary.url("/"), headers={"X-Key": "$CRED{nope}"})
    with (
        httpx.Client(transport=httpx_guard(settings=LOCAL)) as bare,
        pytest.raises(ForbiddenDestination, match="no vault"),
    ):
        bare.get(canary.url("/"), headers={"X-Key": "$CRED{vendor_a}"})
    assert canary.hits == []


@pytest.mark.parametrize(
    ("rule", "host", "allowed"),
    [
        ("api.vendor.example", "api.vendor.example", True),
        ("API.Vendor.Example.", "api.vendor.example", True),
        ("api.vendor.example", "vendor.example", False),
        ("api.vendor.example", "x.api.vendor.example", False),
        ("*.vendor.example", "api.vendor.example", True),
        ("*.vendor.example", "a.b.vendor.example", True),
        ("*.vendor.example", "vendor.example", False),
        ("*.vendor.example", "evilvendor.example", False),
        ("*.vendor.example", "vendor.example.evil.test", False),
        ("vendor.example", "vendor.example.evil.test", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("[::1]", "::1", True),
        ("bücher.example", "xn--bcher-kva.example", True),
    ],
)
def test_domain_rules(rule: str, host: str, allowed: bool) -> None:
    assert domain_allows(normalize_domain_rule(rule), host) is allowed


@pytest.mark.parametrize(
    "rule", ["*", "*.com.", "https://vendor.example", "vendor.example:443", "a/b", "*.*.x.y", ""]
)
def test_bad_domain_rules_are_config_errors(rule: str) -> None:
    with pytest.raises(ConfigError):
        normalize_domain_rule(rule)


def test_placeholders_are_found_in_both_spellings() -> None:
    assert references("a $CRED{one} b %24CRED%7Btwo%7D $CRED%7bone%7d") == ["one", "two"]
    assert references("$CRED{} $CRED{bad name} CRED{x}") == []
    assert placeholder("x") == "$CRED{x}"


def test_scrub_puts_the_placeholder_back_for_every_spelling(secret: str) -> None:
    vault = _vault(secret, None, "127.0.0.1")
    text = f"GET /?k={secret.replace('-', '%2D')} header {secret}"
    assert vault.scrub(text).count("$CRED{vendor_a}") == 1
    assert vault.scrub(f"x {secret} y") == "x $CRED{vendor_a} y"


def test_the_anthropic_api_key_can_live_in_the_vault(canary: Server, secret: str, reply: Any) -> None:
    import anthropic
    import httpx2

    from agentfleet.tools.guard import httpx2_guard

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    canary.routes["/v1/messages"] = lambda h: reply(
        h, 200, json.dumps(message).encode(), {"Content-Type": "application/json"}
    )
    spec = CredentialSpec(env="ANTHROPIC_KEY_FOR_TEST", domains=["127.0.0.1"])
    vault = CredentialVault({"anthropic": spec}, environ={"ANTHROPIC_KEY_FOR_TEST": secret})
    http_client = httpx2.Client(transport=httpx2_guard(settings=LOCAL, vault=vault))
    sdk = anthropic.Anthropic(
        api_key="$CRED{anthropic}", base_url=canary.url(), http_client=http_client, max_retries=0
    )
    reply_message = sdk.messages.create(
        model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply_message.content[0].text == "ok"  # type: ignore[union-attr]
    sent = {key.lower(): value for key, value in canary.hits[0].headers.items()}
    # The SDK sends its key as x-api-key or as a bearer token, depending on its version.
    assert secret in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert secret not in repr(sdk) + repr(sdk.api_key)
