"""Benchmarks, run as scripts from the repository root
(`python experiments/benchmarks/<name>.py`) or imported as
`experiments.benchmarks.<name>`.

A benchmark imports a sibling as `from experiments.benchmarks import <name>`,
which works both ways: a script puts the repository root on sys.path before
it. The TRL and Tunix sides (trl_side.py, trl_step.py, tunix_step.py), which
only run as scripts in their own environments, and the sandbox floor's probe
keep importing siblings from the script's directory.
"""
