"""agentfleet.llm."""
