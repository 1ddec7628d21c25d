"""The ``[dispatch]`` table: what ``Fleet`` checks before it sends a fan-out."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DispatchSettings"]


class DispatchSettings(BaseModel):
    """What ``Fleet.map`` and ``Fleet.pipeline`` check before anything is sent.

    ``require_workers``: refuse a task no live worker has registered (turn it off only when
    workers start on demand, from zero, once work is queued). ``wait_for_workers_s``: how long
    to wait for workers that are starting before refusing, in seconds. ``max_input_bytes``:
    the largest input of one item, in bytes of JSON (1 MiB holds about 250,000 tokens of text,
    more than a model's context window: pass bigger content by reference, a URL or a path).
    """

    model_config = ConfigDict(extra="forbid")

    require_workers: bool = True
    wait_for_workers_s: float = Field(default=0.0, ge=0)
    max_input_bytes: int = Field(default=1024 * 1024, ge=1024)
