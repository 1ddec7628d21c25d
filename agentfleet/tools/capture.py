"""Reading a child's output without blocking it, keeping at most a size cap of it."""

from __future__ import annotations

from typing import IO

__all__ = ["CappedOutput", "drain"]

_READ_SIZE = 65536


class CappedOutput:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self._head_limit + self._tail_limit

    def text(self) -> str:
        """What was kept, as text (a marker names how many bytes were left out)."""
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace")
        omitted = self.total - len(self._head) - len(self._tail)
        return (
            bytes(self._head).decode("utf-8", "replace")
            + f"\n[... {omitted} bytes omitted ...]\n"
            + bytes(self._tail).decode("utf-8", "replace")
        )


def drain(stream: IO[bytes], sink: CappedOutput) -> None:
    """Read ``stream`` to its end into ``sink`` (run it in a thread of its own)."""
    # Keep reading past the cap so the program never blocks on a full pipe.
    try:
        while True:
            data = stream.read1(_READ_SIZE) if hasattr(stream, "read1") else stream.read(_READ_SIZE)
            if not data:
                return
            sink.add(data)
    except (OSError, ValueError):
        # The pipe was closed under us after the grace period; what was read is kept.
        return
