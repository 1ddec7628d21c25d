"""The one Celery app that workers and beat load, configured from the environment.

``celery -A agentfleet.celery_app worker`` (or ``beat``) builds it from ``get_settings()``
(environment and ``agentfleet.toml``) when this module is imported; the configuration itself
is ``agentfleet.celery_config``, which reads nothing. Client code (``Fleet``) never imports
this module, so a setting only workers use cannot break ``from agentfleet import Fleet``.
"""

from __future__ import annotations

from agentfleet.celery_config import make_app
from agentfleet.config import get_settings

__all__ = ["app"]

app = make_app(get_settings())
app.set_current()
app.set_default()
