"""attention.v1 messages written straight to their wire bytes, and answers
read straight from them, for the call made once per layer per token
(SessionService.Extend): no protobuf message is built, and each array's
bytes are copied once, into the message, instead of into a Tensor, a step
and a request in turn. The bytes are what protobuf would write (fields in
number order, scalars packed), so any server parses them as the message;
test_package checks both directions against protobuf's own."""
from typing import Any, List, Optional, Sequence, Tuple

_VARINT = [bytes([i]) for i in range(128)]


def varint(n: int) -> bytes:
    if n < 128:
        return _VARINT[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    """Field `field` of wire type 2 (bytes, strings, messages)."""
    return varint((field << 3) | 2) + varint(len(payload)) + payload


class Parts:
    """A message being written: a list of byte strings (and uint8 views of
    arrays) and their total length, joined once at the end."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: List[Any] = []
        self.size = 0

    def add(self, b: Any) -> None:
        self.parts.append(b)
        self.size += len(b)

    def field(self, field: int, payload: "Parts") -> None:
        """`payload` as field `field` (wire type 2) of this message."""
        self.add(varint((field << 3) | 2) + varint(payload.size))
        self.parts += payload.parts
        self.size += payload.size

    def join(self) -> bytes:
        return b"".join(self.parts)


def tensor(shape: Sequence[int], dtype: int, data: Any) -> Parts:
    """An attention.v1.Tensor: shape (1, packed), dtype (2), data (3). `data`
    is bytes-like (a uint8 view of the array: copied once, by join)."""
    if all(0 <= d < 128 for d in shape):
        dims = bytes(shape)
    else:
        dims = b"".join(varint(int(d)) for d in shape)
    head = (length_delimited(1, dims) if dims else b"") + (b"\x10" + varint(dtype) if dtype else b"")
    out = Parts()
    n = len(data)  # bytes, or a uint8 array
    out.add(head + (b"\x1a" + varint(n) if n else b""))
    if n:
        out.parts.append(data)
        out.size += n
    return out


def session_step(session_id: str, query: Optional[Parts], key: Optional[Parts],
                 value: Optional[Parts], expected_tokens: Optional[int] = None) -> Parts:
    """An attention.v1.SessionStep from its encoded tensors (None: absent)."""
    out = Parts()
    if session_id:
        out.add(length_delimited(1, session_id.encode()))
    for field, t in ((2, query), (3, key), (4, value)):
        if t is not None:
            out.field(field, t)
    if expected_tokens is not None:
        out.add(b"\x28" + varint(int(expected_tokens)))  # field 5, varint
    return out


def extend_parts(layer: int, steps: Sequence[Parts], tail: bytes) -> Parts:
    """An ExtendRequest: its layer (field 1), its steps (2), then `tail`:
    fields 3 and up (causal, scale, options) as protobuf serialized them."""
    out = Parts()
    if layer:
        out.add(b"\x08" + varint(layer))
    for s in steps:
        out.field(2, s)
    out.add(tail)
    return out


# ---- reading -------------------------------------------------------------------


def _varint_at(buf: Any, i: int) -> Tuple[int, int]:
    b = buf[i]
    if b < 128:
        return b, i + 1
    value, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 128:
            return value, i
        shift += 7


def _fields(buf: Any, start: int, end: int) -> List[Tuple[int, int, Any]]:
    """A message's fields: (number, wire type, varint value or (start, end));
    ValueError for a truncated or malformed message."""
    try:
        return _fields_of(buf, start, end)
    except IndexError:
        raise ValueError("a truncated answer") from None


def _fields_of(buf: Any, start: int, end: int) -> List[Tuple[int, int, Any]]:
    out, i = [], start
    while i < end:
        key, i = _varint_at(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint_at(buf, i)
            out.append((number, 0, value))
        elif wire == 2:
            n, i = _varint_at(buf, i)
            out.append((number, 2, (i, i + n)))
            i += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            out.append((number, wire, (i, i + n)))
            i += n
        else:
            raise ValueError(f"unexpected wire type {wire} in an answer")
    if i != end:
        raise ValueError("a truncated answer")
    for _, wire, v in out:
        if wire != 0 and v[1] > end:
            raise ValueError("a truncated answer")
    return out


class TensorView:
    """An attention.v1.Tensor read in place: what from_tensor reads of one
    (shape, dtype, data as a memoryview of the answer, values)."""

    __slots__ = ("shape", "dtype", "data", "values")

    def __init__(self, buf: memoryview, start: int, end: int):
        self.shape: List[int] = []
        self.dtype = 0
        self.data: Any = b""
        self.values: List[float] = []
        for number, wire, v in _fields(buf, start, end):
            if number == 1:
                if wire == 0:
                    self.shape.append(v)
                else:
                    i, stop = v
                    while i < stop:
                        d, i = _varint_at(buf, i)
                        self.shape.append(d)
            elif number == 2 and wire == 0:
                self.dtype = v
            elif number == 3 and wire == 2:
                self.data = buf[v[0]:v[1]]
            elif number == 4:
                import struct
                raw = buf[v[0]:v[1]]
                self.values += list(struct.unpack(f"<{len(raw) // 4}f", raw))


def single_float32_output(resp: bytes) -> Optional[Tuple[Tuple[int, ...], int]]:
    """A decode step's answer read directly: the ExtendResponse holds one
    result that holds only its output, a FLOAT32 Tensor written as protobuf
    writes it (packed shape, dtype, data), and maybe `replayed` after it.
    Returns the output's (shape, offset of its data), or None for any other
    answer (the general reader takes those, and reports a malformed one)."""
    try:
        return _single_float32_output(resp)
    except IndexError:  # truncated
        return None


def _single_float32_output(resp: bytes) -> Optional[Tuple[Tuple[int, ...], int]]:
    n = len(resp)
    if n < 8 or resp[0] != 0x0A:
        return None
    size, i = _varint_at(resp, 1)
    end = i + size
    if end > n or resp[i] != 0x0A or (end != n and resp[end] != 0x12):
        return None
    size, i = _varint_at(resp, i + 1)
    if i + size != end or resp[i] != 0x0A:  # weights or lse follow, or no packed shape
        return None
    size, i = _varint_at(resp, i + 1)
    stop, shape = i + size, []
    while i < stop:
        d, i = _varint_at(resp, i)
        shape.append(d)
    if i + 3 > end or resp[i] != 0x10 or resp[i + 1] != 1 or resp[i + 2] != 0x1A:
        return None  # not dtype FLOAT32 then data (an empty output has no data)
    size, i = _varint_at(resp, i + 3)
    count = 1
    for d in shape:
        count *= d
    if i + size != end or size != 4 * count:
        return None
    return tuple(shape), i


def extend_answers(resp: bytes) -> Tuple[List[dict], List[bool]]:
    """An ExtendResponse's results, each {field name: TensorView} of its
    AttentionResponse (output, weights, lse), and its `replayed` flags."""
    buf = memoryview(resp)
    results, replayed = [], []
    names = {1: "output", 2: "weights", 3: "lse"}
    for number, wire, v in _fields(buf, 0, len(buf)):
        if number == 1 and wire == 2:
            results.append({names[n]: TensorView(buf, *span)
                            for n, w, span in _fields(buf, *v) if n in names and w == 2})
        elif number == 2:
            if wire == 0:
                replayed.append(bool(v))
            else:
                replayed += [bool(x) for x in bytes(buf[v[0]:v[1]])]
    return results, replayed
