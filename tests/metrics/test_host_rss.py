"""The host memory metrics: /proc/self/status parsing and the trainer's readings."""

import os

import pytest

from rl_post.metrics import host_rss

STATUS = """Name:\tpython
VmPeak:\t 9000000 kB
VmHWM:\t 2097152 kB
VmRSS:\t 1048576 kB
RssAnon:\t  900000 kB
"""


def test_parse_status_reads_rss_and_peak_in_bytes():
  assert host_rss.parse_status(STATUS) == {"rss": 2**30, "peak": 2 * 2**30}


def test_metrics_name_the_phase(tmp_path):
  path = tmp_path / "status"
  path.write_text(STATUS)
  assert host_rss.metrics("rollout_", str(path)) == {"host/rollout_rss_gib": 1.0,
                                                    "host/rollout_peak_rss_gib": 2.0}


def test_no_proc_no_metrics(tmp_path):
  assert host_rss.metrics("setup_", str(tmp_path / "missing")) == {}


@pytest.mark.skipif(not os.path.exists(host_rss.STATUS), reason="reads /proc/self/status")
def test_this_process_peak_is_at_least_its_rss():
  m = host_rss.metrics()
  assert 0 < m["host/rss_gib"] <= m["host/peak_rss_gib"]
