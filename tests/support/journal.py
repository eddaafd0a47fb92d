"""Reading what was sent to journald's native protocol."""

from __future__ import annotations

import struct


def decode_entry(data: bytes) -> dict[str, str]:
    """Decode one native-protocol datagram (the inverse of what journald parses)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            out[k.decode()] = v.decode()
            i = nl + 1
        else:
            (n,) = struct.unpack("<Q", data[nl + 1 : nl + 9])
            out[line.decode()] = data[nl + 9 : nl + 9 + n].decode()
            i = nl + 9 + n + 1
    return out
