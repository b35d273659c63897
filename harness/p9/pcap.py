"""9P exchanges as pcap files that Wireshark's and tshark's 9P dissector decodes.

There is no network between the harness and QEMU, so each message is framed as a TCP segment
of one conversation between a "guest" (10.0.2.15:40564) and a "server" (10.0.2.2:564, the 9P
port): requests flow guest → server, replies server → guest, with sequence and acknowledgement
numbers that continue across the case, after a three-way handshake. Every header is a construct
declaration; checksums are computed (Wireshark does not insist, but other tools do).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

from construct import Bytes, Const, Int8ub, Int16ub, Int16ul, Int32ub, Int32ul, Struct, this

from harness.p9.trace import Record

GUEST, SERVER = bytes([10, 0, 2, 15]), bytes([10, 0, 2, 2])
GUEST_PORT, NINEP_PORT = 40564, 564
MAC_GUEST, MAC_SERVER = bytes.fromhex("525400123456"), bytes.fromhex("525400000002")
SYN, ACK, PSH = 0x02, 0x10, 0x08

GLOBAL_HEADER = Struct(
    "magic" / Const(0xA1B2C3D4, Int32ul),
    "major" / Const(2, Int16ul),
    "minor" / Const(4, Int16ul),
    "thiszone" / Const(0, Int32ul),
    "sigfigs" / Const(0, Int32ul),
    "snaplen" / Int32ul,
    "linktype" / Const(1, Int32ul),  # Ethernet
)
RECORD_HEADER = Struct("ts_sec" / Int32ul, "ts_usec" / Int32ul, "incl_len" / Int32ul, "orig_len" / Int32ul)
ETHERNET = Struct("dst" / Bytes(6), "src" / Bytes(6), "ethertype" / Const(0x0800, Int16ub))
IPV4 = Struct(
    "version_ihl" / Const(0x45, Int8ub),
    "tos" / Const(0, Int8ub),
    "length" / Int16ub,
    "ident" / Int16ub,
    "flags_fragment" / Const(0x4000, Int16ub),  # don't fragment
    "ttl" / Const(64, Int8ub),
    "protocol" / Const(6, Int8ub),  # TCP
    "checksum" / Int16ub,
    "src" / Bytes(4),
    "dst" / Bytes(4),
)
TCP = Struct(
    "src_port" / Int16ub,
    "dst_port" / Int16ub,
    "seq" / Int32ub,
    "ack" / Int32ub,
    "offset" / Const(5 << 4, Int8ub),  # 20-byte header
    "flags" / Int8ub,
    "window" / Const(65535, Int16ub),
    "checksum" / Int16ub,
    "urgent" / Const(0, Int16ub),
    "payload" / Bytes(this._.payload_len),
)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class _Conversation:
    def __init__(self) -> None:
        self.seq = {True: 1000, False: 5000}  # True: guest -> server
        self.ident = 0

    def packet(self, from_guest: bool, flags: int, payload: bytes = b"") -> bytes:
        src, dst = (GUEST, SERVER) if from_guest else (SERVER, GUEST)
        sport, dport = (GUEST_PORT, NINEP_PORT) if from_guest else (NINEP_PORT, GUEST_PORT)
        seq, ack = self.seq[from_guest], self.seq[not from_guest] if flags & ACK else 0
        fields = {"src_port": sport, "dst_port": dport, "seq": seq, "ack": ack, "flags": flags, "payload": payload}
        unsummed = TCP.build({**fields, "checksum": 0}, payload_len=len(payload))
        pseudo = src + dst + struct.pack("!BBH", 0, 6, len(unsummed))
        segment = TCP.build({**fields, "checksum": _checksum(pseudo + unsummed)}, payload_len=len(payload))
        self.seq[from_guest] = (seq + len(payload) + (1 if flags & SYN else 0)) & 0xFFFFFFFF
        self.ident = (self.ident + 1) & 0xFFFF
        ip = {"length": 20 + len(segment), "ident": self.ident, "src": src, "dst": dst}
        header = IPV4.build({**ip, "checksum": _checksum(IPV4.build({**ip, "checksum": 0}))})
        macs = {"dst": MAC_SERVER, "src": MAC_GUEST} if from_guest else {"dst": MAC_GUEST, "src": MAC_SERVER}
        return bytes(ETHERNET.build(macs)) + bytes(header) + bytes(segment)


def write_pcap(path: Path, records: Iterable[Record], start_time: float | None = None) -> Path:
    """One capture of the exchange: a handshake, then each sent or received frame as a segment."""
    records = [r for r in records if r.direction in ("-->", "<--") and r.frame]
    base = start_time if start_time is not None else (records[0].time if records else 0.0)
    conversation = _Conversation()
    packets: list[tuple[float, bytes]] = [
        (base, conversation.packet(True, SYN)),
        (base, conversation.packet(False, SYN | ACK)),
        (base, conversation.packet(True, ACK)),
    ]
    for record in records:
        packets.append((record.time, conversation.packet(record.direction == "-->", PSH | ACK, record.frame)))
    out = bytearray(GLOBAL_HEADER.build({"snaplen": 1 << 24}))
    for when, packet in packets:
        wall = 1_700_000_000 + (when - base)  # a fixed epoch keeps captures comparable
        out += RECORD_HEADER.build(
            {"ts_sec": int(wall), "ts_usec": int((wall % 1) * 1e6), "incl_len": len(packet), "orig_len": len(packet)}
        )
        out += packet
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path
