"""Every key real work leaves in Redis is one the registry lists (``agentfleet.keys.KEYS``) or
one a library writes in its own layout: the census.

A Redis of the suite's own holds nothing else. Real workers run a fan-out with an aggregate at
a high priority, a batched fan-out, a pipeline whose item fails for good, an item that fails
for good leaving artifacts, a graph, a fan-out that fails fast and compensates, a step that
fails once, model calls under a run's and a tenant's budget, a credential sent to a
rate-limited vendor that answers 503 then 429, a
malformed queue entry, a requeued dead letter, an item whose claim is taken while its body
runs (so its delivery hands it back), and a scheduled firing under a real beat; the
service counts a wrong token, signs a console session in and is scraped. Meanwhile every key
in Redis is sampled several times a second (claims and delivery counters live only while an
item runs). Then every key seen must match a registered pattern of its Redis type, and every
pattern must have been seen but those named below, which no cheap flow reaches.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import approval_test_tasks as at
import durable_test_tasks as dt
import evidence_test_tasks as et
import fleet_test_tasks as tt
import pytest
import redis
import secret_test_tasks as st
from durable_support import FAR_HOST, durable_cluster
from fault_support import wait_until
from http_scripted import Reply, ScriptedServer
from ops_support import ServiceProcess, wait_for
from ratelimit_support import StoppedRenewer, make_limiter
from redbeat.schedulers import RedBeatConfig
from starlette.testclient import TestClient

from agentfleet import ApprovalStore, LocalCluster, Node
from agentfleet.celery_config import make_app
from agentfleet.config import LimitSpec, Settings, load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.keys import KEYS, KeyPattern
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet
from agentfleet.service import create_app
from agentfleet.transport import layout

pytestmark = pytest.mark.slow

TOKEN = "sec-" + "fedcba9876543210" * 2
SECRET = "vk-census-0123456789"
HOST = "http://testserver"
# Registered, yet no flow here reaches them cheaply: the reconciler marks a suspect only when a
# message was lost (tests/test_reconciler.py covers it); a run counts in its ``done`` hash only
# an index past 2^32 - 1 or the items of a run an earlier version began (tests/test_run_store.py).
UNREACHED = {"p:run:{<id>}:suspect", "p:run:{<id>}:done"}
GRAPH = [
    Node("fetch", dt.fetch),
    Node("summarize", dt.summarize, after=["fetch"]),
    Node("classify", dt.classify, after=["fetch"]),
    Node("report", dt.report, after=["summarize", "classify"]),
]


@dataclass
class Sampler:
    """Every ``(key, type)`` seen in ``client``, sampled until stopped."""

    client: redis.Redis
    seen: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        keys = list(self.client.scan_iter(count=1000))
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.type(key)
        for key, kind in zip(keys, pipe.execute(), strict=True):
            if kind != "none":  # gone between the scan and the look
                self.seen.setdefault(key, kind)

    def run(self) -> None:
        while not self._stop.wait(0.1):
            self.sample()

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Census:
    settings: Settings
    seen: dict[str, str]
    libraries: list[re.Pattern[str]]


def _libraries(settings: Settings) -> list[re.Pattern[str]]:
    """The names kombu, Celery and redbeat write, read from the libraries themselves."""
    app = make_app(settings)
    try:
        backend, beat = app.backend, RedBeatConfig(app)
        prefixes = [backend.task_keyprefix, backend.group_keyprefix, backend.chord_keyprefix, beat.key_prefix]
    finally:
        app.close()
    channel = layout.kombu_redis.Channel
    # kombu's names, as many as this kombu has (a newer one keeps binding deadlines too).
    kombu_names = ("keyprefix_queue", "keyprefix_binding_deadlines", "keyprefix_binding_permanent")
    kombu = [getattr(channel, name) for name in kombu_names if hasattr(channel, name)]
    exact = [
        *layout.queue_keys(*settings.queues.model_dump().values()),
        layout.UNACKED,
        layout.UNACKED_INDEX,
        channel.unacked_mutex_key,
    ]
    return [
        re.compile("|".join(re.escape(name) for name in exact)),
        *(re.compile(re.escape(name).replace("%s", ".+")) for name in kombu),
        *(re.compile(re.escape(_text(prefix)) + ".+") for prefix in prefixes),
    ]


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _schedule(tmp: Path) -> Path:
    config = tmp / "agentfleet.toml"
    config.write_text(
        '[schedules.census]\ntask = "fleet_test_tasks.echo"\ninterval_s = 1.0\ninputs = [{ n = 1 }]\n'
    )
    return config


def _work(fleet: Fleet, far: ScriptedServer) -> str:
    """Every kind of work, on real workers; returns once each run has ended, with the id of the
    pipeline whose item failed for good."""
    far.script("/summarize", Reply(200, {}))
    far.script("/draw", Reply(200, {"ok": True}))
    for n in range(3):
        far.script(f"/undo/{n}", Reply(200, {}))
    # Slow answers and a slow refill keep the vendor's leases and buckets in Redis for a while.
    slow = 0.3
    far.script(
        "/vendor",
        Reply(503, {}, delay_s=slow),
        Reply(429, {}, headers={"retry-after": "1"}, delay_s=slow),
        Reply(200, {}, delay_s=slow),
    )
    runs = [
        fleet.map(tt.echo, [{"n": n} for n in range(12)], aggregate=tt.sum_n, priority=9),
        fleet.map(tt.echo, [{"n": n} for n in range(10)], batch_size=5),
        fleet.pipeline(
            [tt.stage_fetch, tt.stage_extract, tt.stage_report],
            [{"url": "https://ok.example/a"}, {"url": "https://broken.example/b"}],
        ),
        fleet.graph(GRAPH, [{"url": "https://news.example/q"}]),
        fleet.map(
            dt.book, [{"n": n} for n in range(3)] + [{"n": 3, "sleep_s": 1.0, "fail": True}], fail_fast=True
        ),
        fleet.map(dt.draw_then_fail, [{"token": "t1"}]),
        fleet.map(dt.talker, [{"prompt": "LONG 150"}, {"prompt": "LONG 150"}], tenant="acme", budget_usd=0.5),
        fleet.map(et.leave_evidence, [{"log_lines": 5, "note": False}]),
        fleet.map(st.echo_credential, [{"url": far.url("/vendor"), "note": str(n)} for n in range(3)]),
    ]
    for run in runs:
        run.wait(timeout_s=120)
    assert len(far.hits("/vendor")) >= 3, "the vendor answered 503, then 429, then 200"
    wait_until(lambda: runs[4].summary().compensation == "done", 60, "the compensation")
    wait_until(lambda: runs[0].result() is not None, 60, "the aggregate")
    return runs[2].id


def _approvals(fleet: Fleet, sampler: Sampler) -> None:
    """An approval with a timeout decided by a decider that sends nothing (its item waits in
    the outbox for the reconciler), and an event wait completed by its event. The keys that
    live only while items wait are sampled once both wait (the sampler's own pace may miss
    them on a busy machine)."""
    asked = fleet.map(at.asked, [{"timeout_s": 600}])
    waiting = fleet.map(at.waiter, [{"marker": "census", "key": "census:ci"}])
    wait_until(
        lambda: len(fleet.approvals(run=asked.id)) + len(fleet.approvals(run=waiting.id)) == 2,
        60,
        "two pauses",
    )
    sampler.sample()
    (pause,) = fleet.approvals(run=asked.id)
    ApprovalStore(fleet.store.client, prefix=fleet.settings.key_prefix).decide(pause.id, approved=True)
    assert fleet.send_event("census:ci", {"ok": True}) == 1
    for run in (asked, waiting):
        assert run.wait(timeout_s=120).succeeded == 1


def _requeue_and_malformed(fleet: Fleet, broker: redis.Redis, pipeline_id: str) -> None:
    broker.lpush(fleet.settings.queues.agents, b"not a message at all")
    wait_until(lambda: fleet.dlq.store.malformed_counts()["dead_lettered"] >= 1, 60, "the malformed entry")
    broken = fleet.dlq.list(run_id=pipeline_id)
    assert broken, "the pipeline's broken item was dead-lettered"
    fleet.dlq.requeue([broken[0].id])


def _reclaimed_lease(fleet: Fleet) -> None:
    """A holder that never renews (a worker that died holding a slot) loses its lease to the
    next acquire, which counts it."""
    limits = {FAR_HOST: LimitSpec(max_concurrency=2)}
    client, prefix = fleet.store.client, fleet.settings.key_prefix
    dead = make_limiter(client, prefix, limits, lease_ttl_s=0.2, renewer=StoppedRenewer())
    dead.acquire(FAR_HOST, max_wait_s=0)
    time.sleep(0.3)
    alive = make_limiter(client, prefix, limits, lease_ttl_s=5)
    alive.acquire(FAR_HOST, max_wait_s=0).release()
    assert alive.status(FAR_HOST).leases_reclaimed >= 1


def _handed_back(fleet: Fleet) -> None:
    """A delivery whose claim another took while its body ran: its outcome is refused, and it
    hands the item back, coming off the count of deliveries towards poison."""
    run = fleet.map(tt.sleepy, [{"n": 0, "sleep_s": 2.0}])
    store = fleet.store
    claim = store.claim_key(store.items(run.id)[0][1])
    wait_until(lambda: store.client.exists(claim), 60, "the body to start")
    store.client.set(claim, "census-thief:9:0000", px=3_000)
    assert run.wait(timeout_s=120).succeeded == 1


def _service(settings: Settings, fleet: Fleet) -> None:
    """Sign a console session in, scrape the metrics while a queue holds messages, and fail a
    check last (passing one forgets the failures before it)."""
    with TestClient(create_app(settings), base_url=HOST) as client:
        form = client.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf
        signed_in = client.post(
            "/console/login",
            data={"csrf": csrf.group(1), "token": TOKEN},
            headers={"Origin": HOST},
            follow_redirects=False,
        )
        assert signed_in.status_code == 303
        waiting = fleet.map(tt.sleepy, [{"n": n, "sleep_s": 0.2} for n in range(40)])
        assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        waiting.wait(timeout_s=120)
        wrong = {"Authorization": "Bearer wrong-0000000000000000"}
        assert client.get("/runs", headers=wrong).status_code == 401


def _beat(cluster: LocalCluster, fleet: Fleet, log_dir: Path) -> None:
    beat = ServiceProcess("beat", [sys.executable, "-m", "agentfleet", "beat"], cluster.worker_env(), log_dir)
    try:
        wait_for(
            lambda: any(r.name == "census" for r in fleet.runs(50)),
            timeout_s=90,
            what="a scheduled run",
            processes=[beat],
        )
        probe = subprocess.run(
            [sys.executable, "-m", "agentfleet", "healthcheck", "beat"],
            env=cluster.worker_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.returncode == 0, probe.stdout + probe.stderr
    finally:
        beat.stop()


@pytest.fixture(scope="module")
def census(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Census]:
    tmp = tmp_path_factory.mktemp("census")
    env = {
        "AGENTFLEET_TASK_MODULES": ",".join(
            [
                "durable_test_tasks",
                "fleet_test_tasks",
                "secret_test_tasks",
                "evidence_test_tasks",
                "approval_test_tasks",
            ]
        ),
        "AGENTFLEET_DLQ__ARTIFACT_PATTERNS": "*.log",
        "AGENTFLEET_CONFIG": str(_schedule(tmp)),
        "AGENTFLEET_BEAT__MAX_LOOP_INTERVAL_S": "1",
        "AGENTFLEET_LIMITS": json.dumps({FAR_HOST: {"rate_per_s": 1, "burst": 5, "max_concurrency": 2}}),
        "VENDOR_A_KEY": SECRET,
        "AGENTFLEET_CREDENTIALS": json.dumps({"vendor_a": {"env": "VENDOR_A_KEY", "domains": [FAR_HOST]}}),
        "AGENTFLEET_BUDGETS__ALERT_AT": "0.5",
        "AGENTFLEET_BUDGETS__TENANTS": json.dumps({"acme": {"daily_usd": 0.001}}),
    }
    with (
        EmbeddedRedis() as server,
        MockMessagesServer() as mock,
        ScriptedServer(host=FAR_HOST) as far,
        durable_cluster(server.url, mock, far, **env) as cluster,
    ):
        client = redis.Redis.from_url(server.url, decode_responses=True)
        sampler = Sampler(client)
        watching = threading.Thread(target=sampler.run, name="census", daemon=True)
        watching.start()
        try:
            fleet = cluster.fleet()
            _requeue_and_malformed(fleet, client, _work(fleet, far))
            _approvals(fleet, sampler)
            _reclaimed_lease(fleet)
            _handed_back(fleet)
            settings = load_settings(
                broker_url=server.url,
                key_prefix=cluster.settings.key_prefix,
                queues=cluster.settings.queues.model_dump(),
                service={"token": TOKEN},
            )
            _service(settings, fleet)
            _beat(cluster, fleet, tmp)
            sampler.sample()
        finally:
            sampler.stop()
            watching.join(timeout=10)
            client.close()
        yield Census(cluster.settings, dict(sampler.seen), _libraries(cluster.settings))


def _kinds_of(key: str, census: Census) -> list[KeyPattern]:
    return [kind for kind in KEYS if kind.matches(key, census.settings.key_prefix)]


def test_every_key_in_redis_is_registered_or_a_librarys(census: Census) -> None:
    strays = []
    for key, kind in sorted(census.seen.items()):
        if any(pattern.fullmatch(key) for pattern in census.libraries):
            continue
        if not any(found.type == kind for found in _kinds_of(key, census)):
            strays.append(f"{key!r} ({kind})")
    assert not strays, "keys that agentfleet.keys does not list:\n" + "\n".join(strays)


def test_the_work_reached_every_registered_kind_of_key(census: Census) -> None:
    reached = {found.pattern for key in census.seen for found in _kinds_of(key, census)}
    missing = {kind.pattern for kind in KEYS} - reached - UNREACHED
    assert not missing, f"no flow of the census wrote {sorted(missing)}"
