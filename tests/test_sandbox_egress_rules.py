"""The egress proxy's pure parts: which destinations an entry admits, how reflected credential
values are found in a streamed body, and what a program inside is started with."""

from __future__ import annotations

import base64

import pytest

from agentfleet.errors import ConfigError
from agentfleet.sandbox.egress import Destinations, bridge_argv, proxy_env
from agentfleet.sandbox.egress.scrub import Reflections

VALUE = "tok-2f9c81d07a4e5b36"


@pytest.mark.parametrize(
    ("entry", "host", "port", "admitted"),
    [
        ("api.vendor.example", "api.vendor.example", 443, True),
        ("api.vendor.example", "API.Vendor.Example.", 80, True),
        ("api.vendor.example", "api.vendor.example", 8443, False),
        ("api.vendor.example:8443", "api.vendor.example", 8443, True),
        ("api.vendor.example:8443", "api.vendor.example", 443, False),
        ("*.vendor.example", "a.b.vendor.example", 443, True),
        ("*.vendor.example", "vendor.example", 443, False),
        ("*.vendor.example", "evilvendor.example", 443, False),
        ("127.0.0.1:8080", "127.0.0.1", 8080, True),
        ("[::1]:8080", "::1", 8080, True),
        ("api.vendor.example", "api.vendor.example.evil.example", 443, False),
    ],
)
def test_a_declared_entry_admits_exactly_its_hosts_and_ports(
    entry: str, host: str, port: int, admitted: bool
) -> None:
    assert Destinations([entry]).allows(host, port) is admitted


@pytest.mark.parametrize("entry", ["https://api.vendor.example", "*", "*.com", "host:0", "host:99999", "a/b"])
def test_a_malformed_entry_is_one_clear_error(entry: str) -> None:
    with pytest.raises(ConfigError, match="sandbox network entry"):
        Destinations([entry])


def test_no_entry_admits_nothing() -> None:
    assert not Destinations([]).allows("api.vendor.example", 443)
    assert Destinations([]).declared() == "none"


def test_a_value_is_replaced_wherever_a_stream_cuts_it() -> None:
    reflections = Reflections.of(["tok"], lambda _: VALUE)
    body = b"before " + VALUE.encode() + b" between " + base64.b64encode(b"u:" + VALUE.encode()) + b" after"
    for cut in range(1, len(body)):
        out = b"".join(reflections.stream([body[:cut], body[cut:]]))
        assert VALUE.encode() not in out
        assert out.startswith(b"before $CRED{tok} between ") and out.endswith(b" after")


def test_a_value_too_short_to_search_or_unreadable_is_skipped() -> None:
    assert not Reflections.of(["tok"], lambda _: "abc")

    def unreadable(_: str) -> str:
        raise ConfigError("not set")

    assert not Reflections.of(["tok"], unreadable)
    assert list(Reflections(()).stream([b"a", b"b"])) == [b"a", b"b"]


def test_a_program_is_wrapped_by_the_bridge_and_pointed_at_it() -> None:
    argv = bridge_argv("/run/agentfleet/egress.sock", 3128, ["curl", "https://x"])
    assert argv[:4] == ["python3", "-I", "-S", "-c"]
    assert argv[5:] == ["/run/agentfleet/egress.sock", "3128", "--", "curl", "https://x"]
    env = proxy_env(3128, "/ca.pem")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == ""
    assert env["SSL_CERT_FILE"] == env["NODE_EXTRA_CA_CERTS"] == env["GIT_SSL_CAINFO"] == "/ca.pem"
    with pytest.raises(ValueError, match="empty"):
        bridge_argv("/s", 3128, [])
