"""``python -m agentfleet``."""

from agentfleet.cli import main

main()
