"""Agent tools and the layers every outgoing request of a task passes through."""
