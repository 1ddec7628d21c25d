"""Anthropic support: pricing, error mapping, and the mock Messages API for offline runs.

Submodules are imported directly (``agentfleet.llm.pricing``, ``agentfleet.llm.errors``,
``agentfleet.llm.mock_server``...) so that importing the package costs nothing.
"""
