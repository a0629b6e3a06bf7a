"""Entry points (run as scripts: `python experiments/<name>.py`) and benchmarks.

A package so that tests import benchmark modules as `experiments.benchmarks.<name>`
from the repository root (tests/conftest.py puts it on sys.path).
"""
