"""Fakes for the layer below the one under test: a qtest peer, guest memory, a virtio device."""

from __future__ import annotations

import base64
import socket
import struct
import threading
from collections.abc import Callable

from harness.virtio.virtqueue import DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE, RingLayout


class FakeQTestPeer:
    """The QEMU end of a qtest socket: answers each line with ``respond(line)`` (a list of lines)."""

    def __init__(self, respond: Callable[[str], list[str]]) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.respond = respond
        self.received: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        buf = b""
        while True:
            try:
                data = self.theirs.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                text = line.decode()
                self.received.append(text)
                replies = self.respond(text)
                if replies:
                    try:
                        self.theirs.sendall("".join(r + "\n" for r in replies).encode())
                    except OSError:
                        return

    def close(self) -> None:
        self.theirs.close()
        self.ours.close()


class FakeMemory:
    """Guest memory as a bytearray, with the same calls the drivers make on qtest."""

    mapped = False  # batched reads, as on the qtest path

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.writes = 0

    def load16(self, addr: int) -> int:
        return int.from_bytes(self.memread(addr, 2), "little")

    def store16(self, addr: int, value: int) -> None:
        self.memwrite(addr, value.to_bytes(2, "little"))

    def memread(self, addr: int, size: int) -> bytes:
        assert addr >= 0 and addr + size <= len(self.data), f"read {addr:#x}+{size} out of range"
        return bytes(self.data[addr : addr + size])

    def memread_many(self, spans: list[tuple[int, int]]) -> list[bytes]:
        return [self.memread(addr, size) for addr, size in spans]

    def memwrite(self, addr: int, data: bytes) -> None:
        assert addr >= 0 and addr + len(data) <= len(self.data), f"write {addr:#x}+{len(data)} out of range"
        self.data[addr : addr + len(data)] = data
        self.writes += 1


class FakeVirtioDevice:
    """The device side of a split ring: takes chains from the avail ring, completes them on demand."""

    def __init__(self, mem: FakeMemory, layout: RingLayout) -> None:
        self.mem, self.layout = mem, layout
        self.last_avail = 0
        self.used_idx = 0
        self.pending: list[tuple[int, list[tuple[int, int, int]]]] = []  # head, [(addr, len, flags)]

    def take(self) -> int:
        """Pop every newly available chain; returns how many."""
        avail_idx = struct.unpack_from("<H", self.mem.data, self.layout.avail + 2)[0]
        taken = 0
        while self.last_avail != avail_idx:
            slot = self.layout.avail + 4 + 2 * (self.last_avail % self.layout.size)
            head = struct.unpack_from("<H", self.mem.data, slot)[0]
            self.pending.append((head, self._chain(head)))
            self.last_avail = (self.last_avail + 1) & 0xFFFF
            taken += 1
        return taken

    def _chain(self, head: int) -> list[tuple[int, int, int]]:
        addr, length, flags, _ = struct.unpack_from("<QIHH", self.mem.data, self.layout.desc + 16 * head)
        if flags & DESC_F_INDIRECT:
            assert length % 16 == 0 and length, f"indirect table of {length} bytes"
            return self._walk(addr, length // 16, 0)
        return self._walk(self.layout.desc, self.layout.size, head)

    def _walk(self, table: int, size: int, index: int) -> list[tuple[int, int, int]]:
        chain, seen = [], set()
        while True:
            assert index < size and index not in seen, f"bad descriptor index {index}"
            seen.add(index)
            addr, length, flags, nxt = struct.unpack_from("<QIHH", self.mem.data, table + 16 * index)
            chain.append((addr, length, flags))
            if not flags & DESC_F_NEXT:
                return chain
            index = nxt

    def complete(self, position: int = 0, reply: bytes = b"") -> int:
        """Complete the pending chain at ``position``: write ``reply`` into its writable buffer."""
        head, chain = self.pending.pop(position)
        writable = [(addr, length) for addr, length, flags in chain if flags & DESC_F_WRITE]
        written = 0
        if writable and reply:
            addr, length = writable[0]
            written = min(len(reply), length)
            self.mem.memwrite(addr, reply[:written])
        elem = self.layout.used + 4 + 8 * (self.used_idx % self.layout.size)
        self.mem.memwrite(elem, struct.pack("<II", head, written))
        self.used_idx = (self.used_idx + 1) & 0xFFFF
        self.mem.memwrite(self.layout.used + 2, struct.pack("<H", self.used_idx))
        return head


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
