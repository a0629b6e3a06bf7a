"""Entry points (run as scripts: `python experiments/<name>.py`), the demo's
orchestration (`experiments.demo`) and benchmarks.

A package so that the scripts, colab/ and tests import `experiments.demo.<name>` and
benchmark modules as `experiments.benchmarks.<name>` from the repository root
(the scripts' `_bootstrap` and tests/conftest.py put it on sys.path).
"""
