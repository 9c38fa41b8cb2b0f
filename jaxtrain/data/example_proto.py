"""`tf.train.Example` records read and written without TensorFlow: the protobuf wire format.

MaxText's ArrayRecord data holds serialized Examples whose text is a `bytes_list` feature
(`features.feature["text"].bytes_list.value[0]`). The messages involved are small:
  Example   { Features features = 1; }
  Features  { map<string, Feature> feature = 1; }   (entries: key = 1, value = 2)
  Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                           Int64List int64_list = 3; } }
  BytesList { repeated bytes value = 1; }
Only length-delimited fields (wire type 2) are followed; varint and fixed-width fields are
skipped, which is all a reader of bytes features needs.
"""

from __future__ import annotations

from collections.abc import Iterator


class ProtoError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtoError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of each length-delimited field of a message, in order."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtoError("field number 0")
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtoError("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        else:
            raise ProtoError(f"wire type {wire}")
    if pos != len(data):
        raise ProtoError("truncated message")


def bytes_features(record: bytes) -> dict[str, list[bytes]]:
    """{name: values} of an Example's bytes features (other features map to [])."""
    out: dict[str, list[bytes]] = {}
    for number, features in fields(record):
        if number != 1:
            continue
        for entry_number, entry in fields(features):
            if entry_number != 1:
                continue
            key, values = "", []
            for n, part in fields(entry):
                if n == 1:
                    key = part.decode("utf-8")
                elif n == 2:
                    values = [v for kind, lst in fields(part) if kind == 1 for v in _values(lst)]
            out[key] = values
    return out


def _values(bytes_list: bytes) -> list[bytes]:
    return [v for n, v in fields(bytes_list) if n == 1]


def _delimited(number: int, payload: bytes) -> bytes:
    tag, length = _encode_varint(number << 3 | 2), _encode_varint(len(payload))
    return tag + length + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_example(features: dict[str, list[bytes]]) -> bytes:
    """A serialized Example holding bytes features, as `tf.train.Example.SerializeToString()`
    writes it (entries in the order given)."""
    body = b""
    for key, values in features.items():
        bytes_list = b"".join(_delimited(1, v) for v in values)
        feature = _delimited(1, bytes_list)
        body += _delimited(1, _delimited(1, key.encode("utf-8")) + _delimited(2, feature))
    return _delimited(1, body)
