"""agentihooks-swarm: launch swarm workers; keep a refused worker's evidence before deleting it."""
