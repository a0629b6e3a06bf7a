"""Run metrics: JSONL + TensorBoard writers, step timers, latency percentiles."""

from rl_post.metrics.timing import StepTimer, percentiles
from rl_post.metrics.writers import MetricWriter, read_metrics

__all__ = ["MetricWriter", "StepTimer", "percentiles", "read_metrics"]
