"""rl_post.metrics.host_cpu: the CPU figures were measured on."""

from rl_post.metrics import host_cpu

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: not the first processor
flags\t\t: amx_tile
"""


def test_cpuinfo_gives_the_first_processors_model_and_matmul_flags():
  cpu = host_cpu.parse_cpuinfo(CPUINFO)
  assert (cpu["model_name"], cpu["vendor"], cpu["family"], cpu["model"]) == (
      "AMD EPYC", "AuthenticAMD", "26", "2")
  assert cpu["flags"] == ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"]
  assert "family 26, model 2; avx2" in host_cpu.one_line(cpu)


def test_unreadable_cpuinfo_is_named_unknown_not_an_error():
  cpu = host_cpu.parse_cpuinfo("")
  assert cpu["model_name"] == "unknown" and cpu["flags"] == []
  assert "no listed flags" in host_cpu.one_line(cpu)


def test_cache_sizes_read_sysfs_levels_and_skip_instruction_caches(tmp_path):
  for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                           (2, "Unified", "1024K"), (3, "Unified", "32768K")]):
    d = tmp_path / f"index{i}"
    d.mkdir()
    for name, value in (("level", level), ("type", kind), ("size", size)):
      (d / name).write_text(f"{value}\n")
  assert host_cpu.cache_sizes(str(tmp_path)) == {"L1d": "48K", "L2": "1024K", "L3": "32768K"}
  assert host_cpu.cache_sizes(str(tmp_path / "missing")) == {}
  assert host_cpu.describe()["cpus"] >= 1
