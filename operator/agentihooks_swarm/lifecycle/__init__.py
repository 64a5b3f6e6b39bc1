"""What one step of one Execution does: launch, attempts, cleanup, finals, status, Events."""
