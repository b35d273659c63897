"""The 9P layer: the wire format (:mod:`.wire` codec, :mod:`.messages` table), the client
session, 9P over a virtqueue, traces, captures and the malformed catalogue."""

from harness.p9 import messages as _messages  # noqa: F401  (registers every message with the codec)
