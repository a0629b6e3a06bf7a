"""Which logged metrics measure the machine rather than the run.

Tests that compare two runs' metrics.jsonl (resume, late metrics, update
width, chaos, several processes, the demo's seeds) drop the keys under these
prefixes: wall-clock, throughput, progress, compile counts and the host's
memory readings differ between runs that compute the same thing.
"""

MEASURED = ("time/", "throughput/", "perf/", "progress/", "compile/", "host/")
