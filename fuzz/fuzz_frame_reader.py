"""Coverage-guided fuzz target (atheris / libFuzzer) for the frame codec.

Any bytes, fed to a `FrameReader` in any chunking (and through both the
``feed`` and the ``get_buffer``/``buffer_updated`` paths), must yield
messages, NEED_DATA or `FramingError` — nothing else — and the allocator is
never asked for more than the limits allow.

Run it (tox -e fuzz does)::

    python fuzz/fuzz_frame_reader.py -max_total_time=60 fuzz/corpus

A crashing input is written by libFuzzer as ``crash-<sha1>``: copy it into
``fuzz/regressions/``, where the test suite replays every file.

Where atheris cannot be installed (it publishes no wheel for CPython 3.15),
`mutation_run` is the fallback engine the test suite uses: seeded, not
coverage-guided, mutating well-formed messages of both formats and the kept
regressions (byte flips, small and boundary integers written over the header's
fields, inserts, deletes, splices).  It finds what breaks the property near a
valid message; libFuzzer finds more.
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
            "only (CPython 3.11 to 3.14; tests/wire/test_fuzz.py falls back to mutation_run elsewhere): "
            "pip install -e '.[test]' there"
        ) from exc

    # Instrument only this package (instrument_all() would spend half a
    # minute rewriting Tornado, asyncio and ssl too).
    with atheris.instrument_imports(include=["tornado_readinto"]):
        from tornado_readinto.errors import FramingError
        from tornado_readinto.wire.framing import NEED_DATA, FrameReader
else:
    from tornado_readinto.errors import FramingError
    from tornado_readinto.wire.framing import NEED_DATA, FrameReader

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


def seed_inputs(regressions: list[bytes] = ()) -> list[bytes]:
    """Well-formed inputs (a control byte, then messages of both formats,
    some in a stream of two) and the kept ``regressions``: what
    `mutation_run` starts from."""
    from tornado_readinto.wire.framing import message_header, prefixed_message_header

    messages = [[b""], [b"x"], [b"ab", b"cde"], [bytes(range(200)), b"", b"z" * 70], [b"q" * 17] * 5]
    seeds = list(regressions)
    for control in (0x00, 0x07, 0x3F, 0x40, 0x4F, 0x80, 0x83, 0xC0, 0xFF):
        header = prefixed_message_header if control & 0x80 else message_header
        stream = b""
        for frames in messages:
            encoded = header(frames)[0] + b"".join(frames)
            seeds.append(bytes([control]) + encoded)
            stream += encoded
        seeds.append(bytes([control]) + stream)
    return seeds


#: Integers that a mutation writes over 8 bytes (the header's fields are
#: little-endian uint64): the edges of every limit and of the types.
_INTERESTING = (0, 1, 2, 63, 64, 65, MAX_FRAMES, MAX_FRAME_NBYTES - 1, MAX_FRAME_NBYTES, MAX_FRAME_NBYTES + 1,
                MAX_MESSAGE_NBYTES, MAX_MESSAGE_NBYTES + 1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1)


def _mutate(rng, data: bytes, seeds: list[bytes], max_len: int) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            at = min(at, len(buf) - 1)
            buf[at] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # a random byte
            buf[min(at, len(buf) - 1)] = rng.randrange(256)
        elif op == 2:  # an interesting integer over a field
            at = 1 + 8 * rng.randrange(max(1, (len(buf) - 1) // 8 + 1))
            buf[at : at + 8] = rng.choice(_INTERESTING).to_bytes(8, "little")
        elif op == 3:  # insert bytes
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and buf:  # delete a run
            del buf[at : at + rng.randint(1, 16)]
        else:  # splice another seed's tail in
            other = rng.choice(seeds)
            buf[at:] = other[rng.randrange(len(other) + 1):]
    return bytes(buf[:max_len])


def mutation_run(runs: int, *, seed: int = 0, max_len: int = 512, regressions: list[bytes] = ()) -> int:
    """Check the property on ``runs`` inputs mutated from `seed_inputs` with a
    ``random.Random(seed)`` (the same inputs on every machine); the seeds
    themselves are checked first.  Returns the number of inputs checked.
    A violation raises what `check_one_input` raised, with the input as a
    note (``add_note``) to copy into ``fuzz/regressions/``."""
    import random

    rng = random.Random(seed)
    seeds = seed_inputs(list(regressions))
    checked = 0
    for i in range(len(seeds) + runs):
        data = seeds[i] if i < len(seeds) else _mutate(rng, rng.choice(seeds), seeds, max_len)
        try:
            check_one_input(data)
        except BaseException as exc:
            exc.add_note(f"fuzz input (mutation run {i}, seed {seed}): {data!r}")
            raise
        checked += 1
    return checked


def main() -> None:  # pragma: no cover - run by libFuzzer
    atheris.Setup(sys.argv, check_one_input)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
