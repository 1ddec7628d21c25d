"""Cron text, parsed in one place with Celery's own ``crontab`` (the parser beat uses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery.schedules import crontab

__all__ = ["cron_schedule"]


def cron_schedule(text: str) -> crontab:
    """The ``crontab`` of five-field cron text (minute hour day-of-month month day-of-week, UTC).

    Raises ``ValueError`` saying what is wrong, for the settings validators to report.
    """
    # Imported here: reading settings must not import Celery.
    from celery.schedules import crontab

    fields = text.split()
    if len(fields) != 5:
        raise ValueError(
            "must have five fields (minute hour day-of-month month day-of-week), e.g. '0 6 * * *'"
        )
    try:
        return crontab.from_string(" ".join(fields))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"is not a cron expression celery accepts: {exc}") from None
