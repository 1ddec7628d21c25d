"""The SSRF decisions as pure functions: spellings, ranges, the allowlist and resolution."""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Sequence

import pytest

from agentfleet.errors import ConfigError, ConnectionFailed, ForbiddenDestination, TaskTimeout
from agentfleet.tools.ssrf import (
    Allowlist,
    blocked_reason,
    check_host,
    check_scheme,
    normalize_host,
    parse_ip_literal,
    precheck_url,
    system_resolver,
)

NOBODY = Allowlist([])


@pytest.mark.parametrize(
    ("spelled", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f.0x0.0.0x1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("8.8.8.8", "8.8.8.8"),
        ("134744072", "8.8.8.8"),
        ("::1", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("0:0:0:0:0:ffff:7f00:1", "::ffff:7f00:1"),
    ],
)
def test_every_spelling_is_read_as_the_address_it_means(spelled: str, address: str) -> None:
    assert parse_ip_literal(normalize_host(spelled)) == ipaddress.ip_address(address)


@pytest.mark.parametrize("name", ["example.com", "xn--bcher-kva.de", "1.2.3.example", "a-1.b"])
def test_names_are_not_addresses(name: str) -> None:
    assert parse_ip_literal(normalize_host(name)) is None


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.4.5",
        "256.0.0.1",
        "1.256.0.1",
        "127.0.0.0x100",
        "08.0.0.1",
        "example.123",
        "1..1",
        "0x100000000",
        "4294967296",
        "1:2",
    ],
)
def test_malformed_numeric_hosts_are_refused(host: str) -> None:
    with pytest.raises(ForbiddenDestination):
        parse_ip_literal(normalize_host(host))


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("Example.COM.", "example.com"),
        ("[::1]", "::1"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "127.0.0.1"),
        ("127\u30020\u30020\u30021", "127.0.0.1"),
        ("bücher.de", "xn--bcher-kva.de"),
    ],
)
def test_normalisation(raw: str, normal: str) -> None:
    assert normalize_host(raw) == normal


@pytest.mark.parametrize("raw", ["fe80::1%25eth0", "[fe80::1%eth0]", "a b", "a/b", "a@b", "", "."])
def test_hosts_that_cannot_be_hosts_are_refused(raw: str) -> None:
    with pytest.raises(ForbiddenDestination):
        normalize_host(raw)


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "10.1.1.1",
        "100.64.0.1",
        "127.0.0.1",
        "169.254.169.254",
        "172.16.0.1",
        "172.31.255.255",
        "192.0.0.8",
        "192.0.2.1",
        "192.168.1.1",
        "198.18.0.1",
        "198.19.255.255",
        "198.51.100.1",
        "203.0.113.1",
        "224.0.0.251",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::ffff:10.0.0.1",
        "::10.0.0.1",
        "64:ff9b::10.0.0.1",
        "64:ff9b:1::1",
        "2002:c0a8:101::1",
        "2001::1",
        "2001:db8::1",
        "3fff::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "fec0::1",
        "ff02::1",
        "100::1",
        "::ffff:0:7f00:1",
        "4000::1",
    ],
)
def test_non_global_addresses_are_blocked(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700::1111",
        "2a00:1450:4001::1",
        "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
    ],
)
def test_global_addresses_pass(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None


def test_the_allowlist_opens_names_addresses_and_blocks() -> None:
    allow = Allowlist(["127.0.0.1", "10.0.0.0/8", "Intranet.Example.", "[fd00::1]"])
    assert allow.opens_address(ipaddress.ip_address("127.0.0.1"))
    assert allow.opens_address(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert not allow.opens_address(ipaddress.ip_address("127.0.0.2"))
    assert allow.opens_address(ipaddress.ip_address("10.200.3.4"))
    assert allow.opens_address(ipaddress.ip_address("fd00::1"))
    assert allow.opens_host("intranet.example")
    assert not allow.opens_host("other.example")


@pytest.mark.parametrize("entry", ["", "  ", "a b", "10.0.0.0/33", "1.2.3.4.5"])
def test_a_bad_allowlist_entry_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match="allow_private_hosts"):
        Allowlist([entry])


def _answers(*addresses: str) -> Callable[[str, int], Sequence[str]]:
    def resolve(host: str, port: int) -> Sequence[str]:
        return list(addresses)

    return resolve


def test_check_host_resolves_and_orders_addresses() -> None:
    resolver = _answers("2606:4700::1111", "::ffff:8.8.8.8", "8.8.8.8")
    target = check_host("dual.example", 443, scheme="https", allowlist=NOBODY, resolver=resolver)
    assert target.addresses == (
        ipaddress.ip_address("2606:4700::1111"),
        ipaddress.ip_address("8.8.8.8"),
    )
    assert (target.host, target.port, target.is_ip_literal) == ("dual.example", 443, False)
    assert target.opened_by_allowlist is False


def test_one_private_answer_refuses_the_whole_name() -> None:
    resolver = _answers("8.8.8.8", "192.168.0.7")
    with pytest.raises(ForbiddenDestination, match=r"192\.168\.0\.7"):
        check_host("x.example", 80, allowlist=NOBODY, resolver=resolver)


def test_allowlisted_addresses_mark_the_target() -> None:
    target = check_host("127.0.0.1", 80, allowlist=Allowlist(["127.0.0.1"]))
    assert target.opened_by_allowlist and target.is_ip_literal


def test_localhost_names_need_no_resolver_to_be_refused() -> None:
    def never(host: str, port: int) -> Sequence[str]:
        raise AssertionError("resolved")

    for name in ("localhost", "a.localhost"):
        with pytest.raises(ForbiddenDestination, match="localhost"):
            check_host(name, 80, allowlist=NOBODY, resolver=never)


def test_the_system_resolver_is_used_by_default() -> None:
    # Opened by name, localhost resolves through getaddrinfo to loopback and passes.
    target = check_host("localhost", 80, allowlist=Allowlist(["localhost"]))
    assert target.addresses and all(address.is_loopback for address in target.addresses)
    name = normalize_host(socket.gethostname())
    try:
        answers = system_resolver(name, 80)
    except OSError:
        pytest.skip("this machine's own name does not resolve")
    if all(blocked_reason(ipaddress.ip_address(a.split("%")[0])) is None for a in answers):
        pytest.skip("this machine's own name resolves to global addresses")
    with pytest.raises(ForbiddenDestination, match="resolves to"):
        check_host(name, 80, allowlist=NOBODY)


def test_resolution_failures_and_timeouts() -> None:
    def fails(host: str, port: int) -> Sequence[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def slow(host: str, port: int) -> Sequence[str]:
        time.sleep(1)
        return ["8.8.8.8"]

    with pytest.raises(ConnectionFailed, match="could not resolve"):
        check_host("nx.example", 80, allowlist=NOBODY, resolver=fails)
    with pytest.raises(ConnectionFailed, match="no addresses"):
        check_host("empty.example", 80, allowlist=NOBODY, resolver=lambda h, p: [])
    started = time.monotonic()
    with pytest.raises(TaskTimeout):
        check_host("slow.example", 80, allowlist=NOBODY, resolver=slow, timeout_s=0.1)
    assert time.monotonic() - started < 0.8
    with pytest.raises(ForbiddenDestination, match="not an address"):
        check_host("odd.example", 80, allowlist=NOBODY, resolver=lambda h, p: ["nonsense"])


@pytest.mark.parametrize("scheme", ["file", "gopher", "ftp", "dict", "ws", "", "javascript"])
def test_only_http_and_https(scheme: str) -> None:
    with pytest.raises(ForbiddenDestination, match="only http and https"):
        check_scheme(scheme)
    assert check_scheme("HTTPS") == "https"


def test_precheck_leaves_names_to_the_transport() -> None:
    precheck_url("https://example.com/path", NOBODY)
    precheck_url("http://127.0.0.1:8080/", Allowlist(["127.0.0.1"]))
    with pytest.raises(ForbiddenDestination):
        precheck_url("http://0177.0.0.1/", NOBODY)
    with pytest.raises(ForbiddenDestination):
        precheck_url("http:///nohost", NOBODY)
