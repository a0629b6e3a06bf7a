"""RunRequest and the validation that turns one into a wire message."""

import dataclasses
import math
import os
from typing import Mapping, Optional, Union

LANGUAGES = ("python", "bash", "sql")
_MAX_NAME_BYTES = 255


@dataclasses.dataclass(frozen=True)
class RunRequest:
  """One execution; the keyword arguments of `Sandbox.run` as a value."""
  code: Union[str, bytes]
  language: str = "python"
  stdin: Union[str, bytes] = ""
  files: Optional[Mapping[str, Union[str, bytes]]] = None
  timeout_s: Optional[float] = None
  memory_mb: Optional[int] = None


def _as_bytes(value, field):
  if isinstance(value, str):
    return value.encode("utf-8", "surrogateescape")
  if isinstance(value, (bytes, bytearray, memoryview)):
    return bytes(value)
  raise ValueError(f"{field} must be str or bytes, got {type(value).__name__}")


def _check_file_name(name):
  if not isinstance(name, str) or not name:
    raise ValueError(f"files: names must be non-empty str, got {name!r}")
  if "\x00" in name or len(name.encode("utf-8", "surrogateescape")) > 4096:
    raise ValueError(f"files: bad file name {name!r}")
  if os.path.isabs(name):
    raise ValueError(f"files: name must be relative, got {name!r}")
  parts = name.split("/")
  if any(p in ("", ".", "..") for p in parts):
    raise ValueError(f"files: name must not contain '', '.' or '..' "
                     f"components, got {name!r}")
  if any(len(p.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES
         for p in parts):
    raise ValueError(f"files: a path component is too long in {name!r}")


def _check_number(value, field, integer=False):
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise ValueError(f"{field} must be a number, got {value!r}")
  if not math.isfinite(value) or value <= 0:
    raise ValueError(f"{field} must be a finite number > 0, got {value!r}")
  if integer and int(value) != value:
    raise ValueError(f"{field} must be a whole number, got {value!r}")
  return value


def to_wire(config, request):
  """Validates `request` against `config`; returns the zygote's request dict.

  Raises:
    ValueError: naming the offending field.
  """
  if not isinstance(request, RunRequest):
    raise ValueError(f"request must be a RunRequest, got "
                     f"{type(request).__name__}")
  if request.language not in LANGUAGES:
    raise ValueError(f"language must be one of {LANGUAGES}, "
                     f"got {request.language!r}")
  code = _as_bytes(request.code, "code")
  stdin = _as_bytes(request.stdin if request.stdin is not None else b"",
                    "stdin")
  files = request.files or {}
  if not isinstance(files, Mapping):
    raise ValueError(f"files must be a mapping of name -> str/bytes, got "
                     f"{type(files).__name__}")
  wire_files = {}
  for name, content in files.items():
    _check_file_name(name)
    wire_files[name] = _as_bytes(content, f"files[{name!r}]")
  timeout = _check_number(request.timeout_s, "timeout_s") or config.timeout_s
  memory = _check_number(request.memory_mb, "memory_mb", integer=True)
  memory = int(memory or config.memory_mb)
  total = len(code) + len(stdin) + sum(len(v) for v in wire_files.values())
  if total > config.max_input_bytes:
    raise ValueError(f"input too large: code + stdin + files is {total} "
                     f"bytes, max_input_bytes is {config.max_input_bytes}")
  if request.language == "python":
    # compile() accepts bytes; keep text as text so NUL/encoding errors are
    # the candidate's failure, reported by the interpreter.
    code_field = request.code if isinstance(request.code, str) else code
  else:
    code_field = code
  return {
      "op": "run", "mode": config.isolation, "language": request.language,
      "code": code_field, "stdin": stdin, "files": wire_files,
      "timeout_s": float(timeout), "memory_mb": memory,
      "max_output_bytes": config.max_output_bytes,
      "max_files_out": config.max_files_out,
      "max_files_out_bytes": config.max_files_out_mb << 20,
      "seccomp": config.seccomp,
      "limits": {
          "cpu_s": int(math.ceil(timeout)) + 1,
          "file_bytes": config.max_file_mb << 20,
          "open_files": config.max_open_files,
          "procs": config.max_procs,
          "address_space_bytes": None,  # filled in per worker
      },
  }
