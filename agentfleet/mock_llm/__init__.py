"""The mock Messages API: a real HTTP server on loopback that the official Anthropic SDK can call.

A test and demo tool, not part of the fleet: only the CLI (``agentfleet mock-llm``, ``demo``),
``LocalCluster`` and tests import it (an import-linter contract says so). Its errors are its
own (``MockRequestInvalid``, ``MockSetupInvalid``), not the fleet's client-side ones.
"""

from agentfleet.mock_llm.server import DEFAULT_PORT, MockMessagesServer, parse_error_rates, serve

__all__ = ["DEFAULT_PORT", "MockMessagesServer", "parse_error_rates", "serve"]
