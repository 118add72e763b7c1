"""Values as plain data, for the wire between the grader and a student's process.

``to_plain`` turns a value into JSON-ready data; ``from_plain`` builds a fresh value from it. Only
these travel: None, bools, ints, floats, strings, lists, tuples, dicts, torch tensors (dtype,
shape and bytes) and NumPy arrays. Nothing is pickled, so whatever a student's process sends, the
grader gets new objects of its own types, compared with its own, unpatched libraries.

    {"t": [...]}                          a tuple      {"d": [[key, value], ...]}   a dict
    {"tensor": [dtype, shape, base64]}    a tensor     {"ndarray": [dtype, shape, base64]}
    {"float": "nan" | "inf" | "-inf"}     a float JSON cannot spell
"""

from __future__ import annotations

import base64
import math

import numpy as np
import torch

TENSOR_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}
ARRAY_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
                "complex64", "complex128"}
MAX_DEPTH = 32
MAX_DIMS = 32


class NotPlain(TypeError):
    """A value that cannot travel as plain data."""


def to_plain(value, depth: int = 0):
    """``value`` as JSON-ready data; raises ``NotPlain`` naming what cannot travel."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or type(value) in (bool, int, str):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, torch.Tensor):
        return {"tensor": _tensor_to_plain(value)}
    if isinstance(value, np.ndarray):
        return {"ndarray": _array_to_plain(value)}
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return to_plain(value.item(), depth)
    if isinstance(value, list):
        return [to_plain(v, depth + 1) for v in value]
    if isinstance(value, tuple):  # torch.Size included
        return {"t": [to_plain(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in value.items()]}
    raise NotPlain(f"cannot send a {type(value).__name__}: expected tensors, numbers, strings, "
                   "or lists, tuples and dicts of these")


def _tensor_to_plain(t: torch.Tensor) -> list:
    t = torch.Tensor.detach(t).cpu().contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in TENSOR_DTYPES:
        raise NotPlain(f"cannot send a tensor of dtype {t.dtype}: expected one of {sorted(TENSOR_DTYPES)}")
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return [dtype, list(t.shape), base64.b64encode(raw).decode("ascii")]


def _array_to_plain(a: np.ndarray) -> list:
    if a.dtype.name not in ARRAY_DTYPES:
        raise NotPlain(f"cannot send an array of dtype {a.dtype}: expected one of {sorted(ARRAY_DTYPES)}")
    return [a.dtype.name, list(a.shape), base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")]


def from_plain(data, depth: int = 0):
    """A fresh value from ``to_plain``'s data; raises ``NotPlain`` on anything else."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [from_plain(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise NotPlain(f"not plain data: {type(data).__name__} {str(data)[:80]!r}")
    ((kind, body),) = data.items()
    if kind == "t" and type(body) is list:
        return tuple(from_plain(v, depth + 1) for v in body)
    if kind == "d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        try:
            return {from_plain(k, depth + 1): from_plain(v, depth + 1) for k, v in body}
        except TypeError as e:  # a key that cannot be a key (a list, a tensor's data)
            raise NotPlain(f"a dict key is not hashable: {e}") from None
    if kind == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if kind == "tensor":
        return _tensor_from_plain(*_unpack(body, TENSOR_DTYPES))
    if kind == "ndarray":
        return _array_from_plain(*_unpack(body, ARRAY_DTYPES))
    raise NotPlain(f"unknown plain-data kind {kind!r}: expected t, d, float, tensor or ndarray")


def _unpack(body, dtypes) -> tuple[str, list[int], bytes]:
    if not (type(body) is list and len(body) == 3 and type(body[0]) is str and body[0] in dtypes
            and type(body[1]) is list and len(body[1]) <= MAX_DIMS
            and all(type(n) is int and n >= 0 for n in body[1]) and type(body[2]) is str):
        raise NotPlain(f"malformed array data {str(body)[:80]!r}: expected [dtype, shape of at most "
                       f"{MAX_DIMS} sizes, base64]")
    try:
        return body[0], body[1], base64.b64decode(body[2], validate=True)
    except ValueError as e:
        raise NotPlain(f"malformed base64 in array data: {e}") from None


def _tensor_from_plain(dtype: str, shape: list[int], raw: bytes) -> torch.Tensor:
    dt = TENSOR_DTYPES[dtype]
    expected = math.prod(shape) * torch.empty((), dtype=dt).element_size()
    if len(raw) != expected:
        raise NotPlain(f"tensor {dtype}{shape} needs {expected} bytes, got {len(raw)}")
    if not raw:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).reshape(shape).clone()


def _array_from_plain(dtype: str, shape: list[int], raw: bytes) -> np.ndarray:
    expected = math.prod(shape) * np.dtype(dtype).itemsize
    if len(raw) != expected:
        raise NotPlain(f"array {dtype}{shape} needs {expected} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
