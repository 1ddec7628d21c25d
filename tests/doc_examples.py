"""Running the examples of a Markdown document as a reader would, in order, in one sandbox.

The rules, which the README and ``docs/`` are written to:

- A ``python`` block whose first line is ``# <path>`` is a file: it is written to the sandbox
  and used by the blocks after it. A module in a package (``myapp/tasks.py``) is imported at
  once, so it must import cleanly; a script at the top (``classify_reviews.py``) must be run
  by a later block. A ``toml`` block whose first line is ``# agentfleet.toml`` is written too.
- Any other ``python`` block is a script, run with the sandbox on ``PYTHONPATH``.
- A ``sh`` or ``bash`` block runs in bash, line by line (``set -e``); what it exports stays
  set for the blocks after it, as in a terminal. A command that serves until stopped
  (``agentfleet worker``, ``beat``, ``serve``, ``flower``, ``mock-llm``) is started in the
  background, as in another terminal, waited for until it is ready, and stopped by its pid
  when the document ends.
- A block right after ``<!-- not run: REASON -->`` is not run; the reason says why (it needs
  Docker or another host) and which test covers it instead. Blocks in other languages
  (``text`` synopses, ``yaml``, ``json``) are not code to run.

Every document gets a Redis of its own (requiring the password ``PASSWORD`` when its examples
give it) and the mock Messages API.
Addresses the examples name for a reader's machine are mapped to those: ``localhost:6379``
and ``redis.internal:6379`` to the document's Redis, port ``8765`` to a free port for the
mock the example starts, and the service's and Flower's ports come from the environment.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["Block", "DocumentRun", "blocks_of"]

_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.+?)\s*-->$")
_FILE_HEADER = re.compile(r"^#\s+([\w./-]+\.(?:py|toml))\s*$")
# Commands that serve until stopped, and what their output says once they are ready.
_SERVERS = {
    "worker": r"\bready\.",
    "beat": r"beat: Starting",
    "serve": r"agentfleet service on",
    "flower": r"Visit me at|Registered tasks",
    "mock-llm": r"mock Messages API",
}
_READY_TIMEOUT_S = 90.0
_BLOCK_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, text, first line number and, if any, why it is not run."""

    language: str
    text: str
    line: int
    not_run: str | None = None

    @property
    def file_path(self) -> str | None:
        first = self.text.splitlines()[0] if self.text.strip() else ""
        found = _FILE_HEADER.match(first)
        return found.group(1) if found and self.language in ("python", "toml") else None

    @property
    def runs(self) -> bool:
        return self.not_run is None and self.language in ("python", "sh", "bash")


def blocks_of(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order."""
    found: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        reason = None
        before = [line for line in lines[max(0, i - 2) : i] if line.strip()]
        if before and (marker := _NOT_RUN.match(before[-1].strip())):
            reason = marker.group(1)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            body.append(lines[j])
            j += 1
        found.append(Block(opened.group(1).lower(), "\n".join(body) + "\n", i + 1, reason))
        i = j + 1
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_BASH_PRELUDE = r"""
set -e
__af_serve() {
  local log="$AF_DOC_LOGS/server-$RANDOM$RANDOM.log"
  setsid "$@" >"$log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" >> "$AF_DOC_PIDS"
  local pattern="$__AF_READY"
  for _ in $(seq 1 $((AF_READY_TIMEOUT_S * 5))); do
    if grep -Eq "$pattern" "$log"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2; echo "exited before it was ready: $*" >&2; return 1
    fi
    sleep 0.2
  done
  cat "$log" >&2; echo "not ready in time: $*" >&2; return 1
}
__af_listening() {
  for _ in $(seq 1 $((AF_READY_TIMEOUT_S * 5))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  echo "nothing listens on port $1" >&2; return 1
}
agentfleet() {
  case "$1" in
    SERVER_CASES)
      __AF_READY="$(__af_pattern "$1")" __af_serve "$(type -P agentfleet)" "$@"
      if [ "$1" = serve ]; then
        local port="$AGENTFLEET_SERVICE__PORT" previous=""
        for arg in "$@"; do [ "$previous" = --port ] && port="$arg"; previous="$arg"; done
        __af_listening "$port"
      fi ;;
    *) command agentfleet "$@" ;;
  esac
}
"""


def _prelude() -> str:
    cases = "|".join(_SERVERS)
    lookup = "\n".join(f"    {name}) echo {shlex.quote(pattern)} ;;" for name, pattern in _SERVERS.items())
    pattern_fn = f'__af_pattern() {{\n  case "$1" in\n{lookup}\n  esac\n}}\n'
    return pattern_fn + _BASH_PRELUDE.replace("SERVER_CASES", cases)


@dataclass
class DocumentRun:
    """One document's sandbox, environment and background servers."""

    sandbox: Path
    redis_url: str
    llm_url: str
    env_file: Path = field(init=False)
    pids_file: Path = field(init=False)
    mock_port: int = field(default_factory=_free_port)
    service_port: int = field(default_factory=_free_port)

    def __post_init__(self) -> None:
        logs = self.sandbox / ".doc-logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.env_file = logs / "env.sh"
        self.pids_file = logs / "pids"
        self.pids_file.touch()
        base = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", str(self.sandbox)),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(self.sandbox),
            "COLUMNS": "100",
            "AGENTFLEET_BROKER_URL": self.redis_url,
            "AGENTFLEET_LLM__BASE_URL": self.llm_url,
            "AGENTFLEET_SERVICE__PORT": str(self.service_port),
            "AGENTFLEET_FLOWER__PORT": str(_free_port()),
            "AF_DOC_LOGS": str(logs),
            "AF_DOC_PIDS": str(self.pids_file),
            "AF_READY_TIMEOUT_S": str(int(_READY_TIMEOUT_S)),
        }
        self.env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in base.items()))

    def localize(self, text: str) -> str:
        """The example with a reader's addresses mapped to this document's Redis and ports."""
        host_port = urlsplit(self.redis_url).netloc.rpartition("@")[2]
        for address in ("localhost:6379", "redis.internal:6379", "127.0.0.1:6379"):
            text = text.replace(address, host_port)
        text = text.replace("127.0.0.1:8080", f"127.0.0.1:{self.service_port}")
        return text.replace("8765", str(self.mock_port))

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        """Run (or write) ``block``; raises ``AssertionError`` with its output if it fails."""
        text = self.localize(block.text)
        if block.file_path is not None:
            return self._write(block, text)
        if block.language == "python":
            script = self.sandbox / ".doc-logs" / f"block_{block.line}.py"
            script.write_text(text)
            return self._bash(block, f"python {shlex.quote(str(script))}", text)
        return self._bash(block, text, text)

    def _write(self, block: Block, text: str) -> subprocess.CompletedProcess[str]:
        path = Path(str(block.file_path))
        target = self.sandbox / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if block.language != "python" or path.parent == Path("."):
            return subprocess.CompletedProcess([], 0, "", "")
        for parent in path.parents:
            if parent != Path("."):
                (self.sandbox / parent / "__init__.py").touch()
        module = ".".join(path.with_suffix("").parts)
        return self._bash(block, f"python -c {shlex.quote(f'import {module}')}", text)

    def check_scripts_used(self, blocks: list[Block]) -> None:
        """Every top-level script a document writes is run by one of its later blocks."""
        for i, block in enumerate(blocks):
            path = block.file_path
            if path is None or "/" in path or not path.endswith(".py"):
                continue
            later = " ".join(b.text for b in blocks[i + 1 :] if b.runs and b.file_path is None)
            assert path in later, f"{path} (line {block.line}) is written but no later example runs it"

    def _bash(self, block: Block, body: str, shown: str) -> subprocess.CompletedProcess[str]:
        program = (
            f"source {shlex.quote(str(self.env_file))}\n{_prelude()}\n{body}\n"
            f"export -p > {shlex.quote(str(self.env_file))}\n"
        )
        done = subprocess.run(
            ["bash", "-c", program],
            cwd=self.sandbox,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True,
            text=True,
            timeout=_BLOCK_TIMEOUT_S,
        )
        assert done.returncode == 0, (
            f"the {block.language} example at line {block.line} failed (exit {done.returncode}):\n"
            f"{shown}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
        return done

    def stop_servers(self, timeout_s: float = 10.0) -> None:
        """Stop every server the document started, by its pid and process group: SIGTERM to
        all at once, then SIGKILL to what is left after ``timeout_s`` seconds."""
        pids = [int(raw) for raw in self.pids_file.read_text().split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
