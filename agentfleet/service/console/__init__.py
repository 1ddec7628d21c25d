"""The operator's console: server-rendered pages inside ``agentfleet serve``, at ``/console``.

Runs and their items, the dead-letter queue (filter, inspect, requeue with a preview, purge
with a confirmation, in bulk by fingerprint), limits, pauses and circuits, schedules, and
spend by run, downstream and day. No script and no build step: Jinja2 templates and one
stylesheet. Signing in takes the service token; every action needs a CSRF token.
"""

from agentfleet.service.console.routes import create_console

__all__ = ["create_console"]
