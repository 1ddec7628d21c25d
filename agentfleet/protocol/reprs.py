"""What Flower, ``celery inspect`` and Celery's events show of a task message's arguments.

Celery shows a message's ``argsrepr`` and ``kwargsrepr`` headers, never its body: by default
``repr()`` of every argument, which would show the internal ``_af`` block and any secret in
an input. ``message_reprs`` builds them from the user's own inputs instead, redacted and
capped (``agentfleet.redaction.shown_repr``). ``Fleet`` passes them with each item it
dispatches; messages that workers publish again (a retry, a deferral, a requeue, a pipeline's
next stage) get theirs from ``redact_published_reprs``, a ``before_task_publish`` hook that
the worker connects (``agentfleet.tasks.lifecycle``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfleet.protocol.meta import META_KWARG
from agentfleet.redaction import Redactor, shown_repr

__all__ = ["message_reprs", "redact_published_reprs"]


def message_reprs(kwargs: Mapping[str, Any], redactor: Redactor, args: Sequence[Any] = ()) -> dict[str, str]:
    """``argsrepr`` and ``kwargsrepr`` for a message: user inputs only, redacted, at most 1 KiB each."""
    inputs = {key: value for key, value in kwargs.items() if key != META_KWARG}
    return {"argsrepr": shown_repr(tuple(args), redactor), "kwargsrepr": shown_repr(inputs, redactor)}


def redact_published_reprs(body: Any, headers: dict[str, Any] | None, redactor: Redactor) -> None:
    """Replace the reprs in a message's ``headers`` (about to be published) by ``message_reprs``.

    Task protocol 2 only (Celery's default): the body is ``(args, kwargs, embed)``.
    """
    if headers is None or "kwargsrepr" not in headers:
        return
    if not (isinstance(body, tuple | list) and len(body) >= 2 and isinstance(body[1], Mapping)):
        return
    headers.update(message_reprs(body[1], redactor, body[0] or ()))
