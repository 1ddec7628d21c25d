"""agentfleet."""
