"""Server-sent events: split a byte stream into the `data:` payloads of complete events."""

from __future__ import annotations


class SseSplitter:
    """Feed body bytes; get back the data payloads of every event completed by them."""

    __slots__ = ("_buf", "_max_event")

    def __init__(self, max_event_bytes: int = 1 << 20):
        self._buf = b""
        self._max_event = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        if not self._buf and data.endswith(b"\n\n") and data.startswith(b"data:"):
            body = data[5:-2]
            if b"\n" not in body and b"\r" not in body:      # the common case: one whole event
                return [body.strip()]
        buf = self._buf + data if self._buf else data
        held = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # maybe the first half of a CRLF split across reads
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = buf.split(b"\n\n")
        rest = blocks.pop()
        if len(rest) > self._max_event:
            raise ValueError(f"SSE event over {self._max_event} bytes")
        self._buf = rest + held
        out: list[bytes] = []
        for block in blocks:
            if block.startswith(b"data:") and b"\n" not in block:
                out.append(block[5:].strip())
                continue
            lines = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines))
        return out

    @property
    def pending(self) -> bytes:
        return self._buf
