"""The ``[dispatch]`` table: what ``Fleet`` checks before it sends a fan-out, and how it sends it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode

__all__ = ["DispatchSettings"]


class DispatchSettings(BaseModel):
    """What ``Fleet.map`` and ``Fleet.pipeline`` check before anything is sent, and how they send.

    ``require_workers``: refuse a task no live worker has registered (turn it off only when
    workers start on demand, from zero, once work is queued). ``wait_for_workers_s``: how long
    to wait for workers that are starting before refusing, in seconds. ``max_input_bytes``:
    the largest input of one item, in bytes of JSON (1 MiB holds about 250,000 tokens of text,
    more than a model's context window: pass bigger content by reference, a URL or a path).

    ``small_run_items``: a run of at most this many items is served ahead of larger runs'
    waiting messages unless it names its own priority (an interactive run never waits behind
    a batch of thousands). Inputs are read, recorded and sent ``chunk_items`` at a time; while
    the run's queue holds more than ``max_queued`` messages the dispatch waits, looking again
    every ``backpressure_poll_s`` seconds. A dispatch promises its next chunk within
    ``promise_s`` seconds: past that, the reconciler takes its run over (its process died).
    See ``orchestration/dispatch.py``.

    ``allow_aggregates``: functions (``module:function``) that callers outside the process
    (MCP clients, requeues) may name as an aggregate, besides ``agentfleet.merge``'s and the
    named fan-outs' (see ``agentfleet/callables.py``); comma-separated in the environment.
    """

    model_config = ConfigDict(extra="forbid")

    require_workers: bool = True
    wait_for_workers_s: float = Field(default=0.0, ge=0)
    max_input_bytes: int = Field(default=1024 * 1024, ge=1024)
    small_run_items: int = Field(default=100, ge=0)
    chunk_items: int = Field(default=1000, ge=1)
    max_queued: int = Field(default=50_000, ge=1)
    backpressure_poll_s: float = Field(default=0.5, gt=0)
    promise_s: float = Field(default=60.0, ge=1)
    allow_aggregates: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("allow_aggregates", mode="before")
    @classmethod
    def _names_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("allow_aggregates")
    @classmethod
    def _function_names(cls, value: list[str]) -> list[str]:
        for name in value:
            module, sep, function = name.replace(":", ".").rpartition(".")
            if not sep or not module or not function or " " in name:
                raise ValueError(f"{name!r} is not a function name; write each as module:function")
        return value
