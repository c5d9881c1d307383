"""Coverage-guided fuzz target (atheris / libFuzzer) for the frame codec.

Any bytes, fed to a `FrameReader` in any chunking (and through both the
``feed`` and the ``get_buffer``/``buffer_updated`` paths), must yield
messages, NEED_DATA or `FramingError` — nothing else — and the allocator is
never asked for more than the limits allow.

Run it (tox -e fuzz does)::

    python fuzz/fuzz_frame_reader.py -max_total_time=60 fuzz/corpus

A crashing input is written by libFuzzer as ``crash-<sha1>``: copy it into
``fuzz/regressions/``, where the test suite replays every file.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # pragma: no cover - run by libFuzzer
    try:
        import atheris
    except ImportError as exc:
        # setup.cfg's test extra installs it only where it has a wheel.
        raise SystemExit(
            f"fuzz_frame_reader.py needs atheris ({exc}), which publishes wheels for Linux x86_64 "
            "only (CPython 3.10 to 3.14): pip install -e '.[test]' there"
        ) from exc

    # Instrument only this package (instrument_all() would spend half a
    # minute rewriting Tornado, asyncio and ssl too).
    with atheris.instrument_imports(include=["tornado_readinto"]):
        from tornado_readinto.errors import FramingError
        from tornado_readinto.framing import NEED_DATA, FrameReader
else:
    from tornado_readinto.errors import FramingError
    from tornado_readinto.framing import NEED_DATA, FrameReader

MAX_FRAMES = 64
MAX_FRAME_NBYTES = 1 << 16
MAX_MESSAGE_NBYTES = 1 << 18


class LimitCheckingAllocator:
    def __init__(self) -> None:
        self.total = 0

    def __call__(self, nbytes: int) -> bytearray:
        if not 0 <= nbytes <= MAX_FRAME_NBYTES:
            raise AssertionError(f"allocator asked for {nbytes} bytes, over max_frame_nbytes")
        self.total += nbytes
        return bytearray(nbytes)


def check_one_input(data: bytes) -> None:
    """The property, for one input.  Raises AssertionError (or anything that is
    not a FramingError) on a violation."""
    if not data:
        return
    # the first byte picks the chunk size, the driving style and the format
    control, body = data[0], data[1:]
    chunk = 1 + (control & 0x3F)
    use_recv_style = bool(control & 0x40)
    nosplit_prefix = bool(control & 0x80)  # dask's tcp:// stream: P before each message
    allocator = LimitCheckingAllocator()
    reader = FrameReader(
        allocator,
        max_frames=MAX_FRAMES,
        max_frame_nbytes=MAX_FRAME_NBYTES,
        max_message_nbytes=MAX_MESSAGE_NBYTES,
        nosplit_prefix=nosplit_prefix,
    )
    pos = 0
    try:
        while pos < len(body):
            piece = body[pos : pos + chunk]
            if use_recv_style:
                buf = reader.get_buffer()
                n = min(len(buf), len(piece))
                buf[:n] = piece[:n]
                reader.buffer_updated(n)
            else:
                n = reader.feed(piece)
            pos += n
            message = reader.next_message()
            if message is not NEED_DATA:
                if len(message) > MAX_FRAMES or sum(len(f) for f in message) > MAX_MESSAGE_NBYTES:
                    raise AssertionError("a message over the limits was delivered")
                allocator.total = 0
            elif n == 0:
                raise AssertionError("no progress on a reader that needs data")
    except FramingError:
        return
    if allocator.total > MAX_MESSAGE_NBYTES:
        raise AssertionError("allocated more than max_message_nbytes for one message")


def main() -> None:  # pragma: no cover - run by libFuzzer
    atheris.Setup(sys.argv, check_one_input)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
