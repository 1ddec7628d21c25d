"""The compose file as the tests read it: its services with .env values interpolated as compose does."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ops_support import REPO

COMPOSE = REPO / "docker-compose.yml"
AGENTFLEET_SERVICES = ("worker", "worker-fanin", "beat", "flower", "api")
OPTIONAL_SERVICES = ("image", "mock-llm")
SECRETS = ("REDIS_PASSWORD", "FLOWER_BASIC_AUTH", "AGENTFLEET_API_TOKEN")
# What a user puts in .env: long random values, and a Redis password that a URL would have to
# encode ('/', '+' and '=' all appear).
FILLED_IN = {
    "REDIS_PASSWORD": "r3d1s/pa55+w0rd=" + "7" * 16,
    "FLOWER_BASIC_AUTH": "admin:fl0wer-" + "8" * 32,
    "AGENTFLEET_API_TOKEN": "t0ken-" + "9" * 32,
}


def read_dotenv(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        found = env.get(name, "")
        if op == ":?" and not found:
            raise KeyError(f"{name}: {arg}")
        if op == ":-" and not found:
            return arg
        return found

    return _VARIABLE.sub(substitute, value)


def resolved(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolved(item, env) for item in node]
    if isinstance(node, dict):
        return {key: resolved(value, env) for key, value in node.items()}
    return node
