"""Whole-machine busy CPU time (stdlib only; benchmarks and their probes).

user + nice + system + irq + softirq from /proc/stat: kernel threads are
included (namespace teardown runs there), idle, iowait and steal are not.
"""

import os

_TICK = os.sysconf("SC_CLK_TCK")


def busy_s():
  with open("/proc/stat") as f:
    v = [int(x) for x in f.readline().split()[1:8]]
  return (v[0] + v[1] + v[2] + v[5] + v[6]) / _TICK
