"""Flower takes its configuration from agentfleet's settings whichever command starts it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from tornado.options import OptionParser

from agentfleet.config import load_settings
from agentfleet.errors import ConfigError
from agentfleet.tasks.flower_setup import apply_settings, in_flower

OPS_AUTH = "ops:pw-1-" + "0" * 32


@pytest.fixture
def options() -> Iterator[Any]:
    """A fresh copy of Flower's option table, with its defaults."""
    import flower.options  # noqa: F401  (defines Flower's options on tornado's global parser)
    from tornado.options import options as flower_options

    parser = OptionParser()
    for name, option in flower_options._options.items():
        if name in parser._options:  # tornado's own "help"
            continue
        parser.define(
            name.replace("-", "_"), default=option.default, type=option.type, multiple=option.multiple
        )
    yield parser


def test_settings_give_auth_address_and_port(options: Any) -> None:
    settings = load_settings(flower={"basic_auth": OPS_AUTH, "host": "127.0.0.1", "port": 5601})
    apply_settings(options, settings)
    assert (options.basic_auth, options.address, options.port) == ([OPS_AUTH], "127.0.0.1", 5601)


def test_what_flower_was_told_itself_wins(options: Any) -> None:
    options.basic_auth = ["own:auth"]
    options.port = 7000
    options.address = "10.1.2.3"
    apply_settings(options, load_settings(flower={"basic_auth": OPS_AUTH}))
    assert (options.basic_auth, options.address, options.port) == (["own:auth"], "10.1.2.3", 7000)


def test_without_any_auth_flower_is_refused_unless_insecure(options: Any) -> None:
    with pytest.raises(ConfigError, match="AGENTFLEET_FLOWER__BASIC_AUTH"):
        apply_settings(options, load_settings())
    apply_settings(options, load_settings(flower={"insecure": True}))
    assert options.basic_auth == [] and options.address == "127.0.0.1"


def test_oauth_given_to_flower_counts_as_auth(options: Any) -> None:
    options.auth = ".*@example.com"
    apply_settings(options, load_settings())
    assert options.basic_auth == []


def test_outside_flower_importing_it_does_nothing() -> None:
    assert not in_flower()


def test_celery_flower_without_auth_stops_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "agentfleet.celery_app", "flower", "--port=1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "AGENTFLEET_BROKER_URL": "redis://127.0.0.1:9/0"},
    )
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [f"error: {_refusal()}"]


def _refusal() -> str:
    from agentfleet.tasks.flower_setup import OPEN_REFUSED

    return OPEN_REFUSED
