"""Kubernetes I/O: the only place that talks to the API server (``pods``), and pure helpers."""
