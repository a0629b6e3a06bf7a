"""The command line of a benchmark side script: read its spec, write its result.

A side script (`trl_side.py`, `trl_step.py`, `tunix_step.py`, `whole_step.py`)
runs in its own environment, started by the benchmark that owns it as
`python SCRIPT --spec=SPEC.json --out=OUT.json`. Only the standard library
is imported here, so every environment can use it.
"""

import argparse
import json


def read_spec(description: str, argv=None) -> tuple[dict, str]:
  """Parses `--spec` and `--out`; returns the loaded spec and the output path."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--spec", required=True, help="the JSON spec the benchmark wrote")
  parser.add_argument("--out", required=True, help="where to write the result JSON")
  args = parser.parse_args(argv)
  with open(args.spec) as f:
    return json.load(f), args.out


def write_result(path: str, result: dict) -> None:
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
