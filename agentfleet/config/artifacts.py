"""The ``[dlq]`` settings of a dead letter's artifacts (see ``agentfleet.dlq.evidence``)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

__all__ = ["ArtifactSettings", "check_pattern"]


def check_pattern(pattern: str) -> str:
    """``pattern`` when it is a glob relative to the workspace; else ``ValueError`` saying why."""
    if not pattern or not pattern.strip():
        raise ValueError("an artifact pattern is empty")
    if pattern.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", pattern):
        raise ValueError(f"artifact pattern {pattern!r} is absolute; give it relative to the workspace")
    if ".." in pattern.split("/"):
        raise ValueError(f"artifact pattern {pattern!r} climbs out of the workspace (..)")
    return pattern


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class ArtifactSettings(BaseModel):
    """What a dead letter keeps of the files its item left. Sizes are in bytes.

    ``artifact_patterns``: globs relative to the item's workspace (``**/*.png``) used when its
    task's sandbox names none; empty keeps nothing. Each kept file is cut to
    ``artifact_max_bytes`` and an entry's files together to ``artifact_max_total_bytes``; at
    most ``artifact_max_files`` files per entry, found among the first ``artifact_max_walk``
    entries of the workspace. The bytes live in Redis with the entry (as base64, a third
    more), so these caps bound what one failure adds to Redis; ``artifact_max_stored_bytes``
    bounds what every entry's artifacts take together (as stored): past it a new entry lists
    its artifacts with no bytes.
    """

    model_config = ConfigDict(extra="forbid")

    artifact_patterns: Annotated[list[str], NoDecode] = Field(default_factory=list)
    artifact_max_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)
    artifact_max_total_bytes: int = Field(default=4 * 1024 * 1024, ge=1, le=256 * 1024 * 1024)
    artifact_max_files: int = Field(default=20, ge=0, le=1000)
    artifact_max_walk: int = Field(default=10_000, ge=1)
    artifact_max_stored_bytes: int = Field(default=1024 * 1024 * 1024, ge=0)

    @field_validator("artifact_patterns", mode="before")
    @classmethod
    def _patterns_csv(cls, value: Any) -> Any:
        return _split(value)

    @field_validator("artifact_patterns")
    @classmethod
    def _patterns_relative(cls, value: list[str]) -> list[str]:
        return [check_pattern(p) for p in value]

    @model_validator(mode="after")
    def _total_holds_one(self) -> ArtifactSettings:
        if self.artifact_max_total_bytes < self.artifact_max_bytes:
            raise ValueError(
                f"artifact_max_total_bytes ({self.artifact_max_total_bytes}) is smaller than "
                f"artifact_max_bytes ({self.artifact_max_bytes}); raise it or lower artifact_max_bytes"
            )
        return self
