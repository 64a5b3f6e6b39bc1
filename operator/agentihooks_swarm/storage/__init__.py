"""The Redis side: operations, Lua scripts, topology, failover restore, retention."""
