"""kombu's and Celery's own Redis integration suites, run with kombu's stock Redis transport and
with agentfleet's, and compared test by test: ``make test-upstream`` runs
``python -m upstream.run_upstream`` with ``tests/`` on the path. Not collected by ``make test``.
"""
