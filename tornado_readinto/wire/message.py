"""The comm message codec: Python structures <-> frames (pure: no sockets,
no Tornado; msgpack, and numpy when it is installed).

`encode_message` turns a message into frames: frame 0 is the message
serialized with msgpack, where every large buffer is replaced by a
placeholder (a msgpack ExtType naming its frame); frames 1..n are those
buffers, by reference.  `decode_message` reverses it and validates every
placeholder from the peer.  The placeholder codes and the wire format are
described in `tornado_readinto.channel.comm`.
"""

from __future__ import annotations

import pickle
import re
import sys
from collections.abc import Sequence
from typing import Any, Final

try:
    import msgpack
except ImportError as exc:  # an optional dependency since 0.1: the "comm" extra
    raise ImportError(
        f"tornado_readinto.channel.comm needs msgpack ({exc}); "
        "install it with: pip install msgpack (the package's 'comm' extra)"
    ) from exc

from ..errors import FramingError
from .allocators import _get_numpy

__all__ = [
    "EXT_BUFFER",
    "EXT_NDARRAY",
    "EXT_PICKLE",
    "EXT_TUPLE",
    "OUT_OF_BAND_MIN_NBYTES",
    "decode_message",
    "encode_message",
]

#: Buffers (bytes-like objects, numpy arrays, pickle buffers) of at least this
#: many bytes travel out of band, as their own frames sent by reference and
#: received into their own buffers; smaller ones are copied into the msgpack
#: header.  64 KiB: below it the copy costs less than the extra frame (a
#: header entry, a gather slot and an allocation on the receiver); above it
#: the copy dominates.  It is also the read-ahead chunk size, so a message of
#: small values usually arrives in one ``recv``.
OUT_OF_BAND_MIN_NBYTES: Final = 64 * 1024  # bytes

# Placeholder ExtType codes (see the module docstring).
EXT_BUFFER: Final = 1
EXT_NDARRAY: Final = 2
EXT_TUPLE: Final = 3
EXT_PICKLE: Final = 4

# msgpack integers are at most 64 bits.
_INT_MIN: Final = -(1 << 63)
_INT_MAX: Final = (1 << 64) - 1

# numpy dtypes a peer may name: booleans, integers, floats, complex numbers,
# datetimes and timedeltas, in any byte order.  Nothing with fields, objects,
# strings or platform-dependent sizes (long double): np.frombuffer over such
# a dtype could build objects or misread memory.
_DTYPE_RE: Final = re.compile(
    r"[<>|=]?(?:b1|[iu][1248]|f[248]|c(?:8|16)|[mM]8(?:\[(?:Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as)\])?)"
)
_MAX_NDIM: Final = 64  # numpy's NPY_MAXDIMS (32 before numpy 2)


# -- message encoding -----------------------------------------------------------


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def _unpackb(data: Any) -> Any:
    """Plain msgpack (no placeholders), e.g. the comm handshake."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _nbytes(buf: Any) -> int:
    return len(buf) if type(buf) is bytes or type(buf) is bytearray else memoryview(buf).nbytes


class _Encoder:
    """One message's walk: copies its containers, replacing large buffers (and,
    when allowed, unsupported objects) by placeholders; collects the frames."""

    __slots__ = ("frames", "allow_pickle", "min_nbytes", "np")

    def __init__(self, allow_pickle: bool, min_nbytes: int) -> None:
        self.frames: list[Any] = [b""]  # frame 0 is the header, set at the end
        self.allow_pickle = allow_pickle
        self.min_nbytes = min_nbytes
        # numpy arrays can only exist if numpy was imported by someone.
        self.np: Any = sys.modules.get("numpy")

    def encode(self, obj: Any) -> Any:
        t = type(obj)
        if t is str or t is float or t is bool or obj is None:
            return obj
        if t is int:
            return obj if _INT_MIN <= obj <= _INT_MAX else self.fallback(obj)
        if t is dict:
            return {self.key(k): self.encode(v) for k, v in obj.items()}
        if t is list:
            return [self.encode(v) for v in obj]
        if t is tuple:
            return msgpack.ExtType(EXT_TUPLE, _packb([self.encode(v) for v in obj]))
        if t is bytes or t is bytearray or t is memoryview:
            return self.buffer(obj)
        np = self.np
        if np is not None:
            if isinstance(obj, np.ndarray):
                return self.ndarray(obj)
            if isinstance(obj, np.generic):
                return self.scalar(obj)
        # Subclasses of the builtins travel as their base type (as with msgpack).
        if isinstance(obj, (str, float)):
            return obj
        if isinstance(obj, int):
            return int(obj) if _INT_MIN <= obj <= _INT_MAX else self.fallback(obj)
        if isinstance(obj, dict):
            return {self.key(k): self.encode(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.encode(v) for v in obj]
        if isinstance(obj, tuple):
            return msgpack.ExtType(EXT_TUPLE, _packb([self.encode(v) for v in obj]))
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return self.buffer(obj)
        return self.fallback(obj)

    def key(self, k: Any) -> Any:
        """A dict key: stays hashable on the other side (buffers inline)."""
        t = type(k)
        if t is str or t is int or t is bytes or t is float or t is bool or k is None:
            return k
        if isinstance(k, tuple):
            return msgpack.ExtType(EXT_TUPLE, _packb([self.key(v) for v in k]))
        if isinstance(k, (str, int, float, bytes)):
            return k
        np = self.np
        if np is not None and isinstance(k, np.generic):
            return self.scalar(k)
        return self.fallback(k)

    def add_frame(self, frame: Any) -> int:
        self.frames.append(frame)
        return len(self.frames) - 1

    def buffer(self, obj: Any) -> Any:
        view = memoryview(obj)
        if not view.c_contiguous:
            obj = view = memoryview(view.tobytes())  # one copy
        if view.nbytes < self.min_nbytes:
            return obj  # msgpack copies it into the header
        return msgpack.ExtType(EXT_BUFFER, _packb(self.add_frame(view)))

    def ndarray(self, arr: Any) -> Any:
        dtype_str = arr.dtype.str
        if arr.dtype.hasobject or not _DTYPE_RE.fullmatch(dtype_str):
            return self.fallback(arr)
        if arr.flags.c_contiguous:
            data, order = arr, "C"
        elif arr.flags.f_contiguous:
            data, order = arr.T, "F"  # C-contiguous, same bytes: no copy
        else:
            data, order = self.np.ascontiguousarray(arr), "C"  # one copy
        shape = list(arr.shape)
        if arr.nbytes < self.min_nbytes:
            payload: Any = data.tobytes()
        else:
            # A flat uint8 view: datetime64 arrays have no buffer interface.
            payload = self.add_frame(data.reshape(-1).view(self.np.uint8))
        return msgpack.ExtType(EXT_NDARRAY, _packb([payload, dtype_str, shape, order]))

    def scalar(self, obj: Any) -> Any:
        dtype_str = obj.dtype.str
        if obj.dtype.hasobject or not _DTYPE_RE.fullmatch(dtype_str):
            return self.fallback(obj)
        return msgpack.ExtType(EXT_NDARRAY, _packb([obj.tobytes(), dtype_str, None, "C"]))

    def fallback(self, obj: Any) -> Any:
        if not self.allow_pickle:
            raise TypeError(
                f"cannot send {type(obj).__name__} objects without pickle; "
                "open both ends with allow_pickle=True if you trust the peer"
            )
        indices: list[int] = []

        def buffer_callback(pb: pickle.PickleBuffer) -> bool:
            try:
                view = pb.raw()
            except BufferError:  # not contiguous: pickle copies it in band
                return True
            if view.nbytes < self.min_nbytes:
                return True
            indices.append(self.add_frame(view))
            return False

        data = pickle.dumps(obj, protocol=5, buffer_callback=buffer_callback)
        payload: Any = data if len(data) < self.min_nbytes else self.add_frame(data)
        return msgpack.ExtType(EXT_PICKLE, _packb([payload, indices]))


def encode_message(
    msg: Any,
    *,
    allow_pickle: bool = False,
    out_of_band_min_nbytes: int = OUT_OF_BAND_MIN_NBYTES,
) -> list[Any]:
    """Serialize ``msg`` into frames: frame 0 is the msgpack header, frames
    1.. are the out-of-band buffers (see the module docstring).

    Cost: one walk over ``msg`` that copies its containers (dicts, lists,
    tuples; tuples are msgpack-packed on their own), one msgpack pass;
    values under ``out_of_band_min_nbytes`` are copied into the header, larger
    buffers and C- or Fortran-contiguous numpy arrays are referenced, not
    copied (other arrays and non-contiguous buffers are copied once).  The
    frames reference the caller's buffers: do not modify them until sent.

    :arg allow_pickle: pickle (protocol 5, large buffers out of band) objects
        that have no msgpack form; without it they raise ``TypeError``.
    :raises TypeError: ``msg`` holds an object that cannot be sent.
    """
    encoder = _Encoder(allow_pickle, out_of_band_min_nbytes)
    encoder.frames[0] = _packb(encoder.encode(msg))
    return encoder.frames


def _numpy() -> Any:
    numpy = _get_numpy()
    if numpy is None:
        raise FramingError("the message holds a numpy array, but numpy is not installed")
    return numpy


class _Decoder:
    """The ``ext_hook`` of one message: turns placeholders back into objects,
    validating each against the frames received."""

    __slots__ = ("frames", "used", "allow_pickle")

    def __init__(self, frames: Sequence[memoryview], allow_pickle: bool) -> None:
        self.frames = frames
        self.used = [True] + [False] * (len(frames) - 1)
        self.allow_pickle = allow_pickle

    def unpack(self, data: Any) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext_hook, raw=False, strict_map_key=False, use_list=True)

    def take(self, index: Any) -> memoryview:
        if type(index) is not int or not 0 < index < len(self.frames):
            last = len(self.frames) - 1
            raise FramingError(f"placeholder names frame {index!r}, but the message has frames 1 to {last}")
        if self.used[index]:
            raise FramingError(f"placeholder names frame {index} a second time")
        self.used[index] = True
        return self.frames[index]

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == EXT_TUPLE:
            items = self.unpack(data)
            if type(items) is not list:
                raise FramingError(f"tuple placeholder holds {type(items).__name__}, not a list")
            return tuple(items)
        if code == EXT_BUFFER:
            return self.take(self.unpack(data))
        if code == EXT_NDARRAY:
            return self.ndarray(self.unpack(data))
        if code == EXT_PICKLE:
            if not self.allow_pickle:
                raise FramingError(
                    "peer sent a pickled object, but this comm was not opened with allow_pickle=True; "
                    "refusing to unpickle untrusted data"
                )
            return self.unpickle(self.unpack(data))
        raise FramingError(f"unknown placeholder type {code}")

    def ndarray(self, fields: Any) -> Any:
        if type(fields) is not list or len(fields) != 4:
            raise FramingError("array placeholder is not [data, dtype, shape, order]")
        payload, dtype_str, shape, order = fields
        np = _numpy()
        if type(dtype_str) is not str or not _DTYPE_RE.fullmatch(dtype_str):
            raise FramingError(f"array placeholder has dtype {dtype_str!r}, which is not allowed")
        dtype = np.dtype(dtype_str)
        if order not in ("C", "F"):
            raise FramingError(f"array placeholder has order {order!r}, not 'C' or 'F'")
        if shape is not None:
            if type(shape) is not list or len(shape) > _MAX_NDIM or any(type(n) is not int or n < 0 for n in shape):
                raise FramingError(f"array placeholder has invalid shape {shape!r}")
        count = 1
        for n in shape or ():
            count *= n
        expected = count * dtype.itemsize
        if type(payload) is int:
            if shape is None:
                raise FramingError("scalar placeholder must carry its bytes inline")
            buf: Any = self.take(payload)
        elif type(payload) is bytes:
            buf = bytearray(payload)  # inline: small; copied so the result is writable
        else:
            raise FramingError(f"array placeholder data is {type(payload).__name__}, not a frame index or bytes")
        if len(buf) != expected:
            raise FramingError(
                f"array placeholder of shape {shape} and dtype {dtype_str} needs {expected} bytes, got {len(buf)}"
            )
        arr = np.frombuffer(buf, dtype=dtype)
        if shape is None:
            return arr[0]
        return arr.reshape(shape, order=order)

    def unpickle(self, fields: Any) -> Any:
        if type(fields) is not list or len(fields) != 2 or type(fields[1]) is not list:
            raise FramingError("pickle placeholder is not [data, buffer indices]")
        payload, indices = fields
        data = self.take(payload) if type(payload) is int else payload
        if not isinstance(data, (bytes, memoryview)):
            raise FramingError(f"pickle placeholder data is {type(data).__name__}")
        buffers = [self.take(i) for i in indices]
        return pickle.loads(data, buffers=buffers)


def decode_message(frames: Sequence[memoryview], *, allow_pickle: bool = False) -> Any:
    """Rebuild a message from the frames of `encode_message`.

    Cost: one msgpack pass over frame 0 (small values are copied out of it);
    out-of-band buffers come back as the received frames themselves, and
    numpy arrays as ``numpy.frombuffer`` views of them: no copy, writable.

    :arg allow_pickle: unpickle pickle placeholders; without it they are
        refused with `FramingError`.  Only for trusted peers: unpickling runs
        arbitrary code.
    :raises FramingError: no frames, a header msgpack cannot parse, a
        placeholder that does not match the frames (index out of range or used
        twice, dtype not allowed, size mismatch), frames no placeholder names,
        or a refused pickle.
    """
    if not frames:
        raise FramingError("message has no frames (a comm message has at least its header frame)")
    decoder = _Decoder(frames, allow_pickle)
    try:
        msg = decoder.unpack(frames[0])
    except FramingError:
        raise
    except Exception as exc:
        raise FramingError(f"cannot decode message: {type(exc).__name__}: {exc}") from exc
    unused = decoder.used.count(False)
    if unused:
        raise FramingError(f"{unused} of the {len(frames) - 1} out-of-band frames are named by no placeholder")
    return msg
