"""The Swarm: its status, refusal summary and budget."""
