"""Lazy safetensors reading and sharded writing with plain numpy.

The format is an 8-byte little-endian header length, a JSON header
({name: {dtype, shape, data_offsets}}, optional "__metadata__") and the raw
little-endian tensor bytes. Reading memory-maps each file, so slicing a
tensor touches only the pages of that slice: a host reads just the shards
its devices need. bfloat16 goes through `ml_dtypes` (a jax dependency),
which numpy-only readers cannot represent.
"""

import json
import os
import struct

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_CODES = {v: k for k, v in _DTYPES.items()}
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class SafetensorsDir:
  """All tensors of a HF checkpoint directory (one file or an index + shards)."""

  def __init__(self, directory: str):
    self.directory = directory
    index = os.path.join(directory, INDEX_FILE)
    if os.path.exists(index):
      with open(index) as f:
        contents = json.load(f)
      weight_map = contents.get("weight_map") if isinstance(contents, dict) else None
      if not isinstance(weight_map, dict):
        raise ValueError(f"{index} has no 'weight_map'")
      files = sorted(set(weight_map.values()))
    elif os.path.exists(os.path.join(directory, SINGLE_FILE)):
      files = [SINGLE_FILE]
    else:
      found = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
      if not found:
        raise FileNotFoundError(f"no *.safetensors files (and no {INDEX_FILE}) in "
                                f"{directory!r}")
      files = found
    self._entries = {}
    for name in files:
      path = os.path.join(directory, name)
      if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint shard {path!r} listed in {INDEX_FILE} is missing")
      for tensor, entry in _read_header(path).items():
        self._entries[tensor] = entry
    self._maps = {}

  def names(self):
    return self._entries.keys()

  def __contains__(self, name):
    return name in self._entries

  def shape(self, name: str) -> tuple[int, ...]:
    return self._entries[name][1]

  def get(self, name: str) -> np.ndarray:
    """A read-only memory-mapped view of tensor `name`."""
    path, shape, dtype, begin, end = self._entries[name]
    if path not in self._maps:
      self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
    raw = self._maps[path][begin:end]
    return raw.view(dtype).reshape(shape)


def _read_header(path: str) -> dict:
  """{tensor: (path, shape, dtype, begin, end)}, checked against the file's size.

  Raises:
    ValueError: the file is truncated (shorter than its header or a tensor's
      data offsets say), is not a safetensors file, or holds an unsupported dtype.
  """
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    prefix = f.read(8)
    if len(prefix) < 8:
      raise ValueError(f"{path} is truncated: {size} bytes, less than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix)
    if 8 + length > size:
      raise ValueError(f"{path} is truncated or not a safetensors file: its header length "
                       f"says {8 + length} bytes, the file has {size}")
    try:
      header = json.loads(f.read(length))
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
      raise ValueError(f"{path} is not a safetensors file: its header is not JSON ({e})") from e
  if not isinstance(header, dict):
    raise ValueError(f"{path} is not a safetensors file: its header is not a JSON object")
  base = 8 + length
  out = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info["dtype"] not in _DTYPES:
      raise ValueError(f"tensor {name!r} in {path} has unsupported dtype {info['dtype']!r}")
    entry = (path, tuple(info["shape"]), _DTYPES[info["dtype"]], base + info["data_offsets"][0],
             base + info["data_offsets"][1])
    _check_extent(name, entry, size)
    out[name] = entry
  return out


def _check_extent(name: str, entry: tuple, file_size: int):
  """Raises ValueError if tensor `name`'s bytes do not fit its shape or the file."""
  path, shape, dtype, begin, end = entry
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if end - begin != nbytes:
    raise ValueError(f"tensor {name!r} in {path} has data_offsets spanning {end - begin} bytes, "
                     f"its shape {shape} and dtype need {nbytes}")
  if end > file_size:
    raise ValueError(f"{path} is truncated: tensor {name!r} ends at byte {end}, the file has "
                     f"{file_size}")


def write_file(path: str, tensors: dict[str, np.ndarray]):
  """Writes one safetensors file (header padded to 8 bytes, as the spec asks)."""
  header, offset = {}, 0
  arrays = {}
  for name, array in tensors.items():
    array = np.ascontiguousarray(array)
    if array.dtype not in _CODES:
      raise ValueError(f"tensor {name!r} has unsupported dtype {array.dtype}")
    arrays[name] = array
    header[name] = {"dtype": _CODES[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + array.nbytes]}
    offset += array.nbytes
  header["__metadata__"] = {"format": "pt"}
  blob = json.dumps(header, separators=(",", ":")).encode()
  blob += b" " * (-len(blob) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    for array in arrays.values():
      f.write(array.tobytes())


def write_sharded(directory: str, tensors, max_shard_bytes: int):
  """Writes tensors (in order) into files of at most `max_shard_bytes`.

  Args:
    directory: output directory.
    tensors: sequence of (name, nbytes, make) where `make()` returns the
      array; arrays are produced one shard at a time, so the host never
      holds more than one shard.
    max_shard_bytes: size limit per file (a bigger single tensor gets a file
      of its own).
  One file is `model.safetensors`; several are
  `model-0000i-of-0000n.safetensors` plus `model.safetensors.index.json`.
  """
  shards, current, size = [], [], 0
  for entry in tensors:
    if current and size + entry[1] > max_shard_bytes:
      shards.append(current)
      current, size = [], 0
    current.append(entry)
    size += entry[1]
  shards.append(current)
  names = ([SINGLE_FILE] if len(shards) == 1 else
           [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
  weight_map = {}
  for file_name, shard in zip(names, shards):
    write_file(os.path.join(directory, file_name), {name: make() for name, _, make in shard})
    weight_map.update({name: file_name for name, _, _ in shard})
  if len(shards) > 1:
    total = sum(nbytes for shard in shards for _, nbytes, _ in shard)
    with open(os.path.join(directory, INDEX_FILE), "w") as f:
      json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
