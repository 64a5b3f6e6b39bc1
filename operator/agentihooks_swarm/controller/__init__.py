"""What needs a step, and when: the Executions' table and work queue, the reconciler, the
worker-Pod watch, orphans, the Lease.
"""
