"""Anthropic support: pricing and error mapping.

Submodules are imported directly (``agentfleet.llm.pricing``, ``agentfleet.llm.errors``) so
that importing the package costs nothing. The mock Messages API is ``agentfleet.mock_llm``.
"""
