"""The LLM vendors as the fleet sees them: what a call costs, how it is limited, what its
errors mean.

- ``agentfleet.llm.vendor``: ``VendorAdapter``, everything the fleet knows of one vendor
  (which requests are its calls, token estimates and usage, error mapping, pricing);
- ``agentfleet.llm.anthropic`` (with ``agentfleet.llm.anthropic_errors``) and
  ``agentfleet.llm.openai``: the two vendors, Anthropic's Messages API and OpenAI-compatible
  chat completions;
- ``agentfleet.llm.vendors``: the adapters a worker uses, from the settings;
- ``agentfleet.llm.pricing``: the dollar cost of a reply, from the ``llm.prices`` table.

The fleet transport (``agentfleet.tools.transport``) asks the adapters through a protocol, so
``tools/`` imports nothing of this package. A new vendor is one ``VendorAdapter`` subclass in a
module of its own, listed in ``vendors_for``; docs/architecture.md lists the other files it
touches. Submodules are imported directly, so importing the package costs nothing. The mock
Messages API is ``agentfleet.mock_llm``.
"""
