"""What travels between the client and the workers, imported by both.

The client (``agentfleet.orchestration``) builds and sends messages; the worker runtime
(``agentfleet.tasks``) reads them and sends some again (a retry, a deferral, a graph's next
step, a batch item alone). Both build them here, so a message means the same on both sides:

| module | holds |
| --- | --- |
| ``meta.py`` | ``ItemMeta``, the reserved keyword ``_af`` that carries an item's place in its run |
| ``names.py`` | the fleet's own task names and the task ids of a run's messages |
| ``task.py`` | ``FleetTask``, what a fleet task declares, and its input's validation |
| ``messages.py`` | an item's message from a given stage on, the aggregate's, the compensation's |
| ``batches.py`` | the messages of a batched map, several items each |
| ``graphs.py`` | the message of one step of a dependency graph |
| ``reprs.py`` | what Flower and ``celery inspect`` show of a message's arguments |

Stamping a message from a template and kombu's queue layout touch kombu's internals: they
are ``agentfleet.transport.stamping`` and ``agentfleet.transport.layout``.
"""
