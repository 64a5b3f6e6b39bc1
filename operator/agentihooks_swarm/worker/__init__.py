"""What runs inside a worker Pod: its heartbeat and outcome reports."""
