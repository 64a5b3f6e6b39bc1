"""A Redis Cluster node's slot announcement, read late: one message on the cluster bus, sent by a test.

Nodes tell each other which slots they own in every PING and PONG on the cluster bus (each node's
bus port; the message is ``clusterMsg`` in Redis' ``cluster.h``). A node keeps two connections to
each other node, one it opened and one the other opened, so it can read an older announcement
after a newer one: during a reshard that is how a replica of the new owner comes to mark a moved
slot "owner does not claim it" (:meth:`ClusterTopology.restart_replicas` says what follows).
:func:`announce` makes that happen on demand: it opens a connection of its own to a node and sends
a PING as another node, with the slots that node announced before the reshard, then reads the
PONG that answers it, so the PING has been processed when it returns.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Collection
from typing import Any, Final

#: ``sizeof(clusterMsg)`` without its ``data`` union: a PING with no gossip and no extensions.
HEADER_BYTES: Final = 2256
_SLOTS: Final = 16384
_PING: Final = 0
_PROTOCOL: Final = 1
_MASTER_FLAG: Final = 1
# sig, totlen, ver, port, type, count, currentEpoch, configEpoch, offset, sender, myslots.
_HEAD: Final = struct.Struct(f"!4sIHHHHQQQ40s{_SLOTS // 8}s")
# slaveof, myip, extensions, notused1, pport, cport, flags, state, mflags.
_TAIL: Final = struct.Struct("!40s46sH30sHHHB3s")


def ping(*, sender: dict[str, Any], current_epoch: int, slots: Collection[int]) -> bytes:
    """A PING from primary ``sender`` (a node of :meth:`ClusterTopology.view`) announcing ``slots``."""
    bitmap = bytearray(_SLOTS // 8)
    for slot in slots:
        bitmap[slot // 8] |= 1 << (slot % 8)
    head = _HEAD.pack(
        b"RCmb", HEADER_BYTES, _PROTOCOL, sender["port"], _PING, 0,
        current_epoch, sender["config_epoch"], 0, sender["id"].encode(), bytes(bitmap),
    )  # fmt: skip
    # No primary (a primary's slaveof is all zeros), no IP (the receiver knows the sender's).
    tail = _TAIL.pack(b"", b"", 0, b"", 0, sender["bus_port"], _MASTER_FLAG, 0, b"")
    message = head + tail
    if len(message) != HEADER_BYTES:
        raise AssertionError(f"a cluster bus PING is {HEADER_BYTES} bytes, not {len(message)}")
    return message


def announce(*, bus_port: int, message: bytes, timeout: float = 5.0) -> None:
    """Send ``message`` to the node listening on ``bus_port`` and wait for its answer."""
    with socket.create_connection(("127.0.0.1", bus_port), timeout=timeout) as connection:
        connection.sendall(message)
        answer = b""
        while len(answer) < 8:
            chunk = connection.recv(HEADER_BYTES)
            if not chunk:
                raise ConnectionError(f"the node on bus port {bus_port} closed the connection unanswered")
            answer += chunk
    if answer[:4] != b"RCmb":
        raise ConnectionError(f"the node on bus port {bus_port} answered {answer[:16]!r}: no cluster message")
