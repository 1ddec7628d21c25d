"""The broker's and the state's Redis clients are typed apart: mypy refuses one for the other.

Checked with mypy itself, on a module that hands each where the other belongs and one that
hands it where it belongs (with the project's settings and cache, a few seconds after
``make lint``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

MIXED = """\
from agentfleet.config import get_settings
from agentfleet.redis_client import broker_client, state_client
from agentfleet.runs import RunStore
from agentfleet.transport.broker_view import forget_stale

settings = get_settings()
forget_stale(state_client(settings), ["tag"])
RunStore(broker_client(settings))
forget_stale(broker_client(settings), ["tag"])
RunStore(state_client(settings))
"""


def test_mypy_refuses_the_state_client_for_the_broker_and_the_reverse(tmp_path: Path) -> None:
    module = tmp_path / "mixed.py"
    module.write_text(MIXED)
    report, _, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"), str(module)]
    )
    errors = [line.split(": error: ", 1) for line in report.splitlines() if ": error: " in line]
    assert status == 1
    assert [(where.rsplit(":", 1)[-1], what.split(";")[0]) for where, what in errors] == [
        ("7", 'Argument 1 to "forget_stale" has incompatible type "StateRedis"'),
        ("8", 'Argument 1 to "RunStore" has incompatible type "BrokerRedis"'),
    ], report
