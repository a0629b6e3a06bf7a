"""Which CPU figures were measured on (stdlib only): benchmarks and seed tables record it.

Timings move with the CPU, and so do framework-vs-framework ratios: the
whole GRPO step of workload (b) against TRL gives different ratios on an
AMD EPYC with AVX512-BF16 and on one of family 26 (docs/results.md,
"Whole GRPO step vs TRL and Tunix"), because XLA's and torch's matmul
kernels do not gain alike from a newer core. So result files name their CPU.
"""

import os

# instruction-set extensions the matmul kernels of XLA:CPU and torch choose by
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile",
         "amx_bf16")


def parse_cpuinfo(text: str) -> dict:
  """The first processor's fields of /proc/cpuinfo text, with FLAGS it has."""
  fields = {}
  for line in text.splitlines():
    if not line.strip():
      if fields:
        break
      continue
    key, _, value = line.partition(":")
    fields[key.strip()] = value.strip()
  flags = set(fields.get("flags", "").split())
  return dict(model_name=fields.get("model name", "unknown"),
              vendor=fields.get("vendor_id", "unknown"),
              family=fields.get("cpu family", "unknown"), model=fields.get("model", "unknown"),
              flags=[f for f in FLAGS if f in flags])


def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
  """{"L1d": "48K", "L2": "1024K", "L3": "32768K", ...} of cpu0, where sysfs has them."""
  sizes = {}
  def read(name: str, field: str) -> str:
    with open(os.path.join(root, name, field)) as f:
      return f.read().strip()

  for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
    try:
      level, kind, size = (read(name, field) for field in ("level", "type", "size"))
    except OSError:
      continue
    if kind != "Instruction":
      sizes[f"L{level}" + ("d" if kind == "Data" else "")] = size
  return sizes


def describe() -> dict:
  """{model_name, vendor, family, model, flags, caches, cpus}: this machine's CPU."""
  try:
    with open("/proc/cpuinfo") as f:
      info = parse_cpuinfo(f.read())
  except OSError:
    info = parse_cpuinfo("")
  return dict(info, caches=cache_sizes(), cpus=os.cpu_count())


def one_line(cpu: dict) -> str:
  """"AMD EPYC (family 26, model 2; avx2, ...)": `describe()` for a table header."""
  return (f"{cpu['model_name']} (family {cpu['family']}, model {cpu['model']}; "
          f"{', '.join(cpu['flags']) or 'no listed flags'})")
