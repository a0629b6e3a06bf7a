"""Frames between host and worker: exact round trips, malformed input refused."""

import os
import struct

import pytest

from rl_post.sandbox.inner import wire

Q = struct.Struct(">Q")


def _body(text, blobs=()):
  out = Q.pack(len(text)) + text
  for b in blobs:
    out += Q.pack(len(b)) + b
  return out


def test_round_trip_keeps_bytes_raw_and_exact():
  blob = bytes(range(256)) * 1000
  msg = {"a": 1, "s": "x\u00e9", "b": blob, "files": {"f": b"", "g": b"\0"},
         "l": [None, True, 2.5]}
  frame = wire.encode(msg)
  assert len(frame) < len(blob) + 200  # raw, not base64
  (n,) = Q.unpack_from(frame)
  assert n == len(frame) - 8
  assert wire.decode(frame[8:]) == msg


def test_frame_reader_handles_split_input():
  frames = wire.encode({"k": b"abc"}) + wire.encode({"k": b"de"})
  reader = wire.FrameReader()
  got = []
  for i in range(len(frames)):
    reader.feed(frames[i:i + 1])
    while (m := reader.pop()) is not None:
      got.append(m)
  assert got == [{"k": b"abc"}, {"k": b"de"}]


def test_run_header_round_trip():
  r, w = os.pipe()
  h = {"timeout_s": 2.5, "max_output_bytes": 7, "max_files_out": 3,
       "max_files_out_bytes": 9, "prepare_ahead": 1}
  os.write(w, wire.encode_run_header(h))
  raw, got = wire.read_run_header(r)
  assert got == h and len(raw) == wire.RUN_HEADER.size


@pytest.mark.parametrize("body", [
    b"",                                            # too short
    Q.pack(100) + b"{}",                            # JSON overruns
    _body(b'{"a":{"__blob__":1}}', [b"x"]),         # no such blob
    _body(b'{"a":{"__blob__":0},"b":{"__blob__":0}}', [b"x"]),  # used twice
    _body(b'{"a":1}', [b"x"]),                      # unreferenced blob
    _body(b'{"a":{"__blob__":true}}', [b"x"]),      # bool index
    _body(b'{"a":{"__blob__":0,"c":1}}', [b"x"]),   # extra keys
    _body(b"{}") + b"\0\0\0",                       # truncated blob length
    _body(b"{}") + Q.pack(10) + b"x",               # blob overruns
    _body(b"[1]"),                                  # not an object
    _body(b"\xff"),                                 # not UTF-8
    _body(b"[" * 100000 + b"]" * 100000),           # too deep
])
def test_malformed_frames_are_refused(body):
  with pytest.raises(wire.WireError):
    wire.decode(body)


def test_oversized_frame_is_refused_before_reading_it():
  reader = wire.FrameReader(max_bytes=10)
  with pytest.raises(wire.WireError, match="exceeds"):
    reader.feed(Q.pack(11))
