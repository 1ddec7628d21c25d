"""Run inside a test's network namespace: how long Redis calls take to fail on a silent link.

``python netns_probe.py GO_FILE``: with the settings from the environment, opens agentfleet's
state client and a Celery producer (the broker), makes one call on each so their connections
are open, prints ``ready``, waits until ``GO_FILE`` exists (the test has cut the link by then),
then times three state calls (one after another) beside one publish and prints them as one
JSON line:
``{"state": [[seconds, error class], ...], "publish": [seconds, error class]}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentfleet.celery_config import make_app
from agentfleet.config import get_settings
from agentfleet.redis_client import connect


def timed(call: Callable[[], Any]) -> list[Any]:
    started = time.monotonic()
    try:
        call()
        error = ""
    except Exception as exc:
        error = type(exc).__name__
    return [round(time.monotonic() - started, 2), error]


def main(go_file: str) -> None:
    settings = get_settings()
    client = connect(settings.redis_target())
    client.ping()
    app = make_app(settings)
    queue = f"{settings.key_prefix}.probe"
    app.send_task("probe.noop", queue=queue)
    print("ready", flush=True)
    while not Path(go_file).exists():
        time.sleep(0.05)
    with ThreadPoolExecutor(1) as beside:
        publishing = beside.submit(timed, lambda: app.send_task("probe.noop", queue=queue))
        state = [timed(lambda: client.get("probe")) for _ in range(3)]
        publish = publishing.result()
    print(json.dumps({"state": state, "publish": publish}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
