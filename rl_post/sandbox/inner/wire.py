"""What travels between the host and a worker (stdlib only).

A request is a fixed-size binary run header (the limits the zygote and the
runner need, so neither has to parse JSON) followed by a payload frame that
only the candidate reads. A frame is an 8-byte big-endian length followed by
UTF-8 JSON; bytes values travel as ``{"__b64__": "..."}``. The host treats
every frame it reads as untrusted data: plain JSON, decoded with a size
cap, never unpickled.
"""

import base64
import json
import os
import struct

_HEADER = struct.Struct(">Q")
# timeout_s, max_output_bytes (per stream), max_files_out, max_files_out_bytes
RUN_HEADER = struct.Struct(">dQQQ")
RUN_HEADER_FIELDS = ("timeout_s", "max_output_bytes", "max_files_out",
                     "max_files_out_bytes")
MAX_FRAME_BYTES = 256 * 1024 * 1024


class WireError(Exception):
  """The peer sent something that is not a valid frame."""


def _encode_default(obj):
  if isinstance(obj, (bytes, bytearray, memoryview)):
    return {"__b64__": base64.b64encode(bytes(obj)).decode("ascii")}
  raise TypeError(f"cannot encode {type(obj).__name__}")


def _decode_hook(obj):
  if len(obj) == 1 and "__b64__" in obj:
    value = obj["__b64__"]
    if not isinstance(value, str):
      raise WireError("bad __b64__ value")
    return base64.b64decode(value.encode("ascii"), validate=True)
  return obj


def encode(message):
  payload = json.dumps(message, default=_encode_default,
                       separators=(",", ":")).encode("utf-8")
  return _HEADER.pack(len(payload)) + payload


def decode(payload):
  try:
    message = json.loads(payload.decode("utf-8"), object_hook=_decode_hook)
  except (ValueError, RecursionError, UnicodeDecodeError) as e:
    raise WireError(f"undecodable frame: {e}") from None
  if not isinstance(message, dict):
    raise WireError("frame is not a JSON object")
  return message


def write_frame(fd, message):
  data = encode(message)
  view = memoryview(data)
  while view:
    n = os.write(fd, view)
    view = view[n:]


def _read_exact(fd, n):
  chunks = []
  while n:
    chunk = os.read(fd, min(n, 1 << 20))
    if not chunk:
      raise EOFError("peer closed the channel")
    chunks.append(chunk)
    n -= len(chunk)
  return b"".join(chunks)


def encode_run_header(header):
  return RUN_HEADER.pack(*(header[k] for k in RUN_HEADER_FIELDS))


def read_run_header(fd):
  """(raw bytes, dict) of the next run header; EOFError at end of input."""
  raw = _read_exact(fd, RUN_HEADER.size)
  return raw, dict(zip(RUN_HEADER_FIELDS, RUN_HEADER.unpack(raw)))


def read_frame(fd, max_bytes=MAX_FRAME_BYTES):
  (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
  if length > max_bytes:
    raise WireError(f"frame of {length} bytes exceeds {max_bytes}")
  return decode(_read_exact(fd, length))


class FrameReader:
  """Incremental frame parser for non-blocking reads (used with poll)."""

  def __init__(self, max_bytes=MAX_FRAME_BYTES):
    self._buf = bytearray()
    self._max = max_bytes

  def feed(self, data):
    self._buf += data
    if len(self._buf) >= _HEADER.size:
      (length,) = _HEADER.unpack_from(self._buf)
      if length > self._max:
        raise WireError(f"frame of {length} bytes exceeds {self._max}")

  def pop(self):
    """Returns the next complete message, or None."""
    if len(self._buf) < _HEADER.size:
      return None
    (length,) = _HEADER.unpack_from(self._buf)
    end = _HEADER.size + length
    if len(self._buf) < end:
      return None
    payload = bytes(self._buf[_HEADER.size:end])
    del self._buf[:end]
    return decode(payload)
