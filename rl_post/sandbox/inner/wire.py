"""What travels between the host and a worker (stdlib only).

A request is a fixed-size binary run header (the limits the zygote and the
runner need, so neither has to parse JSON) followed by a payload frame that
only the candidate reads. A frame is an 8-byte big-endian length, then the
body: an 8-byte length and UTF-8 JSON, then the raw bytes values ("blobs"),
each an 8-byte length and its bytes. In the JSON a bytes value is
``{"__blob__": i}``, the i-th blob; no base64, so large inputs, outputs and
files cost one copy. The host treats every frame it reads as untrusted
data: plain JSON and bounded blobs, decoded with a size cap, every blob
used exactly once, never unpickled.
"""

import json
import os
import struct

_HEADER = struct.Struct(">Q")
# timeout_s, max_output_bytes (per stream), max_files_out,
# max_files_out_bytes, prepare_ahead (0/1: prepare the next run meanwhile)
RUN_HEADER = struct.Struct(">dQQQB")
RUN_HEADER_FIELDS = ("timeout_s", "max_output_bytes", "max_files_out",
                     "max_files_out_bytes", "prepare_ahead")
MAX_FRAME_BYTES = 256 * 1024 * 1024
_BLOB_KEY = "__blob__"


class WireError(Exception):
  """The peer sent something that is not a valid frame."""


def encode(message):
  blobs = []

  def default(obj):
    if isinstance(obj, (bytes, bytearray, memoryview)):
      blobs.append(obj)
      return {_BLOB_KEY: len(blobs) - 1}
    raise TypeError(f"cannot encode {type(obj).__name__}")

  text = json.dumps(message, default=default,
                    separators=(",", ":")).encode("utf-8")
  parts = [b"", _HEADER.pack(len(text)), text]
  for blob in blobs:
    parts += [_HEADER.pack(len(blob)), blob]
  body_len = sum(len(p) for p in parts)
  parts[0] = _HEADER.pack(body_len)
  return b"".join(parts)


def _split_body(body):
  """(JSON text, [blobs]) of a frame body, with every length checked."""
  view = memoryview(body)
  if len(view) < _HEADER.size:
    raise WireError("frame body too short")
  (n,) = _HEADER.unpack_from(view)
  pos = _HEADER.size + n
  if pos > len(view):
    raise WireError("frame JSON overruns the frame")
  text = view[_HEADER.size:pos]
  blobs = []
  while pos < len(view):
    if pos + _HEADER.size > len(view):
      raise WireError("truncated blob length")
    (n,) = _HEADER.unpack_from(view, pos)
    start = pos + _HEADER.size
    pos = start + n
    if pos > len(view):
      raise WireError("blob overruns the frame")
    blobs.append(bytes(view[start:pos]))
  return bytes(text), blobs


def decode(body):
  text, blobs = _split_body(body)
  used = set()

  def hook(obj):
    if _BLOB_KEY in obj:
      i = obj[_BLOB_KEY]
      if (len(obj) != 1 or not isinstance(i, int) or isinstance(i, bool) or
          not 0 <= i < len(blobs) or i in used):
        raise WireError("bad blob reference")
      used.add(i)
      return blobs[i]
    return obj

  try:
    message = json.loads(text.decode("utf-8"), object_hook=hook)
  except (ValueError, RecursionError, UnicodeDecodeError) as e:
    raise WireError(f"undecodable frame: {e}") from None
  if not isinstance(message, dict):
    raise WireError("frame is not a JSON object")
  if len(used) != len(blobs):
    raise WireError("frame has unreferenced blobs")
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
