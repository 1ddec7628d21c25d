"""The bridge that runs inside a sandbox: loopback TCP to the proxy's Unix socket, then the program.

Standard library only, and run as ``python3 -I -S bridge_main.py SOCKET PORT -- ARGV...``
(or its source given to ``-c``): nothing of agentfleet needs to be visible inside. It listens
on ``127.0.0.1:PORT``, forwards each connection to the Unix socket ``SOCKET``, runs ``ARGV``
with the same standard streams, passes on SIGTERM, SIGINT and SIGHUP, and exits with the
program's exit code (128 + the signal number when a signal ended it; 127 when it cannot be
started). The bridge ends with the program.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading

_CHUNK = 65536


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _join(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        upstream.close()
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def forward(listener: socket.socket, path: str) -> None:
    """Accept on `listener` until it closes; join each connection to the Unix socket `path`."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        # Each chunk goes on as it arrives: a small write must not wait for the peer's ACK.
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_join, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: bridge SOCKET PORT -- PROGRAM [ARGS...]\n")
        return 2
    path, port, command = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    threading.Thread(target=forward, args=(listener, path), daemon=True).start()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]}: {exc.strerror or exc}\n")
        return 127

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
