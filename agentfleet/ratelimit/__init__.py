"""agentfleet.ratelimit."""
