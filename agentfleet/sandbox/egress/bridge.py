"""How a sandboxed program is started so that it reaches the network through its proxy.

``bridge_argv`` wraps the program's argv in the bridge (``bridge_main.py``, standard library
only, run by the system's ``python3 -I -S`` from its source, so nothing of agentfleet has to be
visible inside); ``proxy_env`` is the environment that points HTTP clients at it and makes
them trust the proxy's CA, and only that CA (every TLS connection goes through the proxy).
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["BRIDGE_PYTHON", "CA_ENV_NAMES", "bridge_argv", "bridge_source", "proxy_env"]

BRIDGE_PYTHON = "python3"
"""The interpreter the bridge runs on inside the sandbox (looked up on its ``PATH``)."""

CA_ENV_NAMES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
)
"""The variables through which common clients (OpenSSL, requests, curl, Node, git, pip, the
AWS SDKs, cargo) are told which CA file to trust."""


@functools.cache
def bridge_source() -> str:
    """The bridge's source, as ``python3 -c`` runs it."""
    return (Path(__file__).with_name("bridge_main.py")).read_text(encoding="utf-8")


def bridge_argv(socket_inside: str, port: int, argv: list[str]) -> list[str]:
    """``argv`` run behind a bridge from ``127.0.0.1:port`` to the Unix socket ``socket_inside``
    (paths as the sandbox sees them); the result exits with the program's exit code."""
    if not argv:
        raise ValueError("the program's argv is empty")
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not a TCP port")
    return [BRIDGE_PYTHON, "-I", "-S", "-c", bridge_source(), socket_inside, str(port), "--", *argv]


def proxy_env(port: int, ca_inside: str) -> dict[str, str]:
    """The environment that sends HTTP(S) through the bridge on ``port`` and trusts the CA at
    ``ca_inside`` (as the sandbox sees it). ``NO_PROXY`` is empty: even ``127.0.0.1`` goes
    through the proxy (a program that serves on the sandbox's own loopback and calls itself
    sets ``NO_PROXY`` for that call)."""
    proxy = f"http://127.0.0.1:{port}"
    env = {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    env.update({"NO_PROXY": "", "no_proxy": ""})
    env.update(dict.fromkeys(CA_ENV_NAMES, ca_inside))
    return env
