"""agentfleet.tools."""
