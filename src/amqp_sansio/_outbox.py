"""What a connection will write, in order: one buffer the shell and its channels append to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from ._frames import content_buffers, encode_content, encode_method_frame
from ._generated.spec_0_9_1 import FRAME_MIN_SIZE

if TYPE_CHECKING:
    from ._method import Buffer, ContentProperties, Method
    from ._protocol import ProtocolSpec

__all__ = ["PASSTHROUGH", "Outbox"]

#: Bodies at least this large are handed to ``buffers_to_send`` as memoryview slices.
PASSTHROUGH: Final = 64 * 1024


@final
class Outbox:
    """Frames waiting to be written: ``data``, after the large bodies kept whole in ``chunks``.

    Frames are encoded with the peer's ``frame_max``; a version that numbers a shared method
    class differently (``wire_ids``) gets its ids written over the class's own, and a version
    with fewer field types gets its tables narrowed first (``ProtocolSpec.narrow``). Neither
    costs 0-9-1 more than one test of ``adjusted``.
    """

    __slots__ = ("adjusted", "chunks", "data", "frame_max", "spec", "wire_ids")

    def __init__(self, spec: ProtocolSpec) -> None:
        self.data = bytearray()
        #: Buffers before ``data``, in order: large bodies stay slices of the caller's body.
        self.chunks: list[Buffer] = []
        #: The peer's limit on what we send (the spec's minimum until tune).
        self.frame_max = FRAME_MIN_SIZE
        self.spec: Final = spec
        self.wire_ids: Final = spec.wire_ids
        #: Whether sends need renumbering or narrowing at all (never in 0-9-1).
        self.adjusted: Final = bool(spec.wire_ids) or spec.table_types is not None

    def method(self, channel: int, method: Method) -> None:
        """Append one method frame; on an error nothing is appended.

        :raises LocalProtocolError: a field can't be encoded, or the frame is too large.
        """
        data = self.data
        start = len(data)
        if self.adjusted:
            method = self.spec.narrow(method)
        encode_method_frame(data, channel, method, frame_max=self.frame_max)
        if self.adjusted:
            self._renumber(start, method)

    def content(
        self,
        channel: int,
        method: Method,
        properties: ContentProperties,
        body: Buffer,
        *,
        relay: bool = False,
    ) -> None:
        """Append a method with its content header and body frames (large bodies by
        reference); on an error nothing is appended. *relay*: the properties are passed on
        as received, not narrowed."""
        if self.adjusted:
            method = self.spec.narrow(method)
            if not relay:
                properties = self.spec.narrow(properties)
        if memoryview(body).nbytes >= PASSTHROUGH:
            buffers = content_buffers(channel, method, properties, body, self.frame_max)
            ids = self.wire_ids.get(type(method)) if self.wire_ids else None
            if ids is not None:  # the method frame starts the first buffer, a bytearray
                head = buffers[0]
                assert isinstance(head, bytearray)
                head[7:11] = ids
            if self.data:
                self.chunks.append(self.data)
                self.data = bytearray()
            self.chunks.extend(buffers)
            return
        start = len(self.data)
        encode_content(self.data, channel, method, properties, body, self.frame_max)
        if self.adjusted:
            self._renumber(start, method)

    def _renumber(self, start: int, method: Method) -> None:
        ids = self.wire_ids.get(type(method))
        if ids is not None:  # after the frame header: class id and method id
            self.data[start + 7 : start + 11] = ids

    @property
    def size(self) -> int:
        """Octets waiting."""
        size = len(self.data)
        for chunk in self.chunks:
            size += memoryview(chunk).nbytes
        return size

    def take(self) -> bytes:
        """Everything waiting, as one ``bytes``; empties the outbox."""
        if self.chunks:
            self.chunks.append(self.data)
            data = b"".join(self.chunks)
            self.chunks = []
        else:
            data = bytes(self.data)
        self.data = bytearray()
        return data

    def take_buffers(self) -> list[Buffer]:
        """Everything waiting, as buffers for ``writelines``/``sendmsg``; empties the outbox."""
        buffers = self.chunks
        if self.data:
            buffers.append(self.data)
        self.chunks = []
        self.data = bytearray()
        return buffers
