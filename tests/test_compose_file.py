"""docker-compose.yml, .env.example, the Dockerfile and .dockerignore, read as files.

The services are interpolated as compose does, with .env.example and the secrets a user fills
in (the Redis password holds '/', '+' and '='). The file is checked against the Compose
specification's JSON schema and by a security linter for Compose files (compose-lint).
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from importlib import resources
from typing import Any

import jsonschema
import pytest
import yaml
from compose_support import (
    AGENTFLEET_SERVICES,
    COMPOSE,
    FILLED_IN,
    OPTIONAL_SERVICES,
    SECRETS,
    read_dotenv,
    resolved,
)
from ops_support import BIN, REPO


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


@pytest.fixture(scope="module")
def dotenv() -> dict[str, str]:
    return read_dotenv(REPO / ".env.example")


@pytest.fixture(scope="module")
def filled_env(dotenv: dict[str, str]) -> dict[str, str]:
    return {**dotenv, **FILLED_IN}


@pytest.fixture(scope="module")
def services(compose: dict[str, Any], filled_env: dict[str, str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = resolved(compose["services"], filled_env)
    return found


def test_every_service_has_a_healthcheck_and_a_restart_policy(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"redis", *AGENTFLEET_SERVICES, *OPTIONAL_SERVICES}
    for name, service in services.items():
        if "build" in service.get("profiles", []):
            continue  # builds the image and runs nothing
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name
        check = service.get("healthcheck", {})
        assert check.get("test") and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert check.get("interval") and check.get("timeout") and check.get("retries"), name


def test_redis_requires_a_password_never_evicts_and_appends_every_second(
    services: dict[str, dict[str, Any]],
) -> None:
    redis_service = services["redis"]
    command = " ".join(redis_service["command"])
    assert '--requirepass "$REDIS_PASSWORD"' in command
    assert "--maxmemory-policy noeviction" in command
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "ports" not in redis_service, "Redis is reached on the compose network only"
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"]), (
        "the AOF outlives the container"
    )
    assert "REDISCLI_AUTH" in redis_service["environment"], "the healthcheck authenticates"


def test_agent_workers_scale_and_take_only_agent_work(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker, "--scale worker=N needs neither"
    command = worker["command"]
    assert command[command.index("--queues") + 1] == "agents"
    assert command[command.index("--pool") + 1] == "gevent"
    high, low = (int(n) for n in command[command.index("--autoscale") + 1].split(","))
    assert high > low >= 1
    fanin = services["worker-fanin"]["command"]
    assert fanin[fanin.index("--queues") + 1] == "fanin,maintenance"


def test_exactly_one_beat(services: dict[str, dict[str, Any]]) -> None:
    beat = services["beat"]
    assert beat["deploy"]["replicas"] == 1
    assert beat["command"][:2] == ["agentfleet", "beat"]


def test_flower_and_the_api_are_published_on_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    for name in ("flower", "api"):
        for mapping in services[name]["ports"]:
            assert str(mapping).startswith("127.0.0.1:"), f"{name} publishes {mapping}"
    for name in ("redis", "worker", "worker-fanin", "beat"):
        assert "ports" not in services[name], name
    assert services["flower"]["environment"]["AGENTFLEET_FLOWER__BASIC_AUTH"]


def test_secrets_come_only_from_the_env_file(compose: dict[str, Any], dotenv: dict[str, str]) -> None:
    text = COMPOSE.read_text()
    for secret in SECRETS:
        assert f"${{{secret}:?" in text, f"{secret} must be required from .env"
        assert dotenv[secret] == "", ".env.example holds no secret, not even a placeholder one"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO, check=False)
    assert ignored.returncode == 0, ".env is ignored by git"


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_left_unfilled_stops_the_stack_with_a_clear_message(
    compose: dict[str, Any], dotenv: dict[str, str], secret: str
) -> None:
    # .env.example copied as it is, or with one secret still empty: compose refuses to start.
    env = {**dotenv, **{name: value for name, value in FILLED_IN.items() if name != secret}}
    with pytest.raises(KeyError, match=f"{secret}: set {secret}") as caught:
        resolved(compose["services"], env)
    assert "in .env" in str(caught.value)


def test_the_redis_password_travels_apart_from_the_url(services: dict[str, dict[str, Any]]) -> None:
    for name in AGENTFLEET_SERVICES:
        env = services[name]["environment"]
        assert env["AGENTFLEET_BROKER_URL"] == "redis://redis:6379/0", name
        assert env["AGENTFLEET_REDIS_PASSWORD"] == FILLED_IN["REDIS_PASSWORD"], name


def test_the_image_runs_the_package_as_a_non_root_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11[.\w-]*$", dockerfile, re.M)
    assert re.search(r"^USER (?!0\b|root)\d+:\d+$", dockerfile, re.M), "a numeric non-root user"


def test_the_image_installs_the_locked_versions_checked_against_their_hashes() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY pyproject.toml uv.lock README.md ./" in dockerfile
    assert "uv export --quiet --frozen --no-emit-project" in dockerfile
    assert "pip install --require-hashes --requirement /tmp/requirements.txt" in dockerfile
    assert "pip install --no-deps ." in dockerfile, "agentfleet itself brings in nothing unlocked"
    uv_version = re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert uv_version and f"ARG UV_VERSION={uv_version.group(1)}" in dockerfile, "one uv reads the lock"


def _compose_schema() -> dict[str, Any]:
    # The Compose specification's schema, as check-jsonschema vendors it (no network needed).
    schemas = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((schemas / "compose-spec.json").read_text())
    return schema


def test_the_file_follows_the_compose_specification(
    compose: dict[str, Any], filled_env: dict[str, str]
) -> None:
    validator = jsonschema.Draft7Validator(_compose_schema())
    interpolated = resolved(compose, filled_env)  # what compose validates, after interpolation
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(interpolated)]
    assert problems == []


def test_a_compose_security_linter_finds_nothing_high_or_critical() -> None:
    out = subprocess.run(
        [str(BIN / "compose-lint"), "check", "--no-env", "--format", "json", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(out.stdout)
    serious = [f for f in report["findings"] if f["severity"] in ("high", "critical") and not f["suppressed"]]
    assert serious == [] and out.returncode == 0, out.stdout[-3000:]
    assert report["findings"], "the linter read the services (it reports the medium findings left)"


def test_every_container_is_hardened(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        assert service.get("read_only") is True, name
        assert service.get("cap_drop") == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert not service.get("privileged"), name
        limits = service["deploy"]["resources"]["limits"]
        assert float(limits["cpus"]) > 0 and re.fullmatch(r"\d+[kmg]", str(limits["memory"])), name
    assert services["redis"]["user"] == "redis", "Redis does not run as root"


def test_a_users_own_image_is_never_built_over(services: dict[str, dict[str, Any]]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    pinned = f"agentfleet:{version}"
    builders = {name: s for name, s in services.items() if "build" in s}
    assert list(builders) == ["image"] and builders["image"]["image"] == pinned
    assert builders["image"]["profiles"] == ["build"], "it builds on request and runs nothing"
    raw = yaml.safe_load(COMPOSE.read_text())["services"]
    for name, service in resolved(raw, {**FILLED_IN, "AGENTFLEET_IMAGE": "acme/agents:1.2"}).items():
        if name in (*AGENTFLEET_SERVICES, "mock-llm"):
            assert service["image"] == "acme/agents:1.2" and "build" not in service, name
    for name in AGENTFLEET_SERVICES:
        assert services[name]["image"] == pinned, "the default is the pinned version, not latest"
    assert ":latest" not in COMPOSE.read_text() and ":latest" not in (REPO / "Dockerfile").read_text()


def test_the_build_context_is_only_what_the_image_copies() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "everything is left out unless named"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = set()
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    assert allowed == copied, "the context holds what the Dockerfile copies, and nothing else"


def test_env_example_promises_only_what_compose_runs(compose: dict[str, Any], dotenv: dict[str, str]) -> None:
    text = COMPOSE.read_text()
    for name in dotenv:
        assert name.startswith("COMPOSE_") or f"${{{name}" in text, f"{name} is used by docker-compose.yml"
    example = (REPO / ".env.example").read_text()
    mock = compose["services"]["mock-llm"]
    assert "AGENTFLEET_LLM__BASE_URL=http://mock-llm:8765" in example and "COMPOSE_PROFILES=mock" in example
    assert mock["profiles"] == ["mock"]
    assert mock["command"][:2] == ["agentfleet", "mock-llm"] and "8765" in mock["command"]
    worker_env = compose["services"]["worker"]["environment"]
    assert worker_env["AGENTFLEET_LLM__BASE_URL"] == "${AGENTFLEET_LLM__BASE_URL:-}"
