"""Entry points report user errors as one line with exit status 2; bugs keep tracebacks."""

import os
import shutil
import subprocess
import sys

import pytest

from configs import grpo_arithmetic
from rl_post import cli
from rl_post.errors import ConfigError, MissingInputError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args, prefix=()):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  return subprocess.run([*prefix, sys.executable, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)


def _assert_one_line_error(proc, expected):
  assert proc.returncode == 2, proc.stderr
  assert "Traceback" not in proc.stderr, proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert errors == [expected], proc.stderr


def _rl(tokenizer_path, workdir, *overrides):
  return ["experiments/train_rl.py", "--config=configs/grpo_arithmetic.py:tiny",
          f"--config.tokenizer.path={tokenizer_path}", f"--workdir={workdir}", *overrides]


def test_bad_config_value_is_one_line(tokenizer_path, tmp_path):
  proc = _run(_rl(tokenizer_path, tmp_path / "run", "--config.rl.num_generations=1"))
  _assert_one_line_error(
      proc, "error: rl.num_generations=1: must be >= 2 for grpo (its advantages need a group), got 1")


def test_missing_init_from_names_the_field(tokenizer_path, tmp_path):
  missing = tmp_path / "no_export"
  proc = _run(_rl(tokenizer_path, tmp_path / "run", f"--config.rl.init_from={missing}"))
  _assert_one_line_error(
      proc, f"error: rl.init_from={str(missing)!r}: is not a directory; point it at the "
            "export/ folder of a finished SFT run")


def test_missing_tokenizer_names_the_field(tmp_path):
  missing = tmp_path / "none.model"
  proc = _run(_rl(missing, tmp_path / "run"))
  assert proc.returncode == 2 and f"error: tokenizer.path={str(missing)!r}: does not exist" \
      in proc.stderr, proc.stderr


@pytest.mark.parametrize("script,config,override,expected", [
    ("train_rl.py", "grpo_arithmetic.py", "--config.rl.num_generations=1",
     "error: rl.num_generations=1: must be >= 2 for grpo (its advantages need a group), got 1"),
    ("train_sft.py", "sft_arithmetic.py", "--config.sft.batch_size=0",
     "error: sft.batch_size=0: must be > 0, got 0"),
])
def test_a_bad_value_is_reported_before_the_runs_inputs_are_read(tmp_path, script, config,
                                                                 override, expected):
  """A config error comes first: the missing tokenizer is not what the user hears of,
  and nothing is written to the (checked, empty) workdir of a run that cannot start."""
  proc = _run([f"experiments/{script}", f"--config=configs/{config}:tiny",
               f"--config.tokenizer.path={tmp_path / 'none.model'}",
               f"--workdir={tmp_path / 'run'}", override])
  _assert_one_line_error(proc, expected)
  assert os.listdir(tmp_path / "run") == []


def test_workdir_that_is_a_file(tokenizer_path, tmp_path):
  path = tmp_path / "a_file"
  path.write_text("x")
  proc = _run(["experiments/train_sft.py", "--config=configs/sft_arithmetic.py:tiny",
               f"--workdir={path}"])
  _assert_one_line_error(proc, f"error: --workdir={str(path)!r}: is a file, not a directory")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (launch/test.sh)")
def test_read_only_workdir(tmp_path):
  # A read-only bind mount stops root too (chmod would not).
  ro = tmp_path / "ro"
  ro.mkdir()
  bwrap = ("bwrap", "--bind", "/", "/", "--ro-bind", str(ro), str(ro), "--dev", "/dev",
           "--proc", "/proc")
  proc = _run(["experiments/train_sft.py", "--config=configs/sft_arithmetic.py:tiny",
               f"--workdir={ro}"], prefix=bwrap)
  _assert_one_line_error(
      proc, f"error: --workdir={str(ro)!r}: is not writable (Read-only file system)")


def test_config_error_line_forms():
  config = grpo_arithmetic.get_config("tiny")
  config.rl.clip_low = 1.5
  assert cli.config_error_line(config, "rl.clip_low must be in [0, 1), got 1.5") == \
      "rl.clip_low=1.5: must be in [0, 1), got 1.5"
  line = cli.config_error_line(
      config, "rl: unknown field(s) ['num_generation']; known fields: ['a']")
  assert line == "rl.num_generation: unknown field(s) ['num_generation']; known fields: ['a']"
  assert cli.config_error_line(config, "rl: minibatch size 3\nmust divide") == \
      "rl: minibatch size 3 must divide"
  # Not a field of the config: not a user error.
  assert cli.config_error_line(config, "shapes (3,) and (4,) differ") is None
  # Starts with a section's name but is about something else: a bug, not a user error.
  for bug in ("rewards of shape (6,) do not split into groups of 4",
              "seed 3: report summary lacks 'demo'", "eval 'after' must list the same problems"):
    assert cli.config_error_line(config, bug) is None, bug
  assert cli.config_error_line(None, "rl.clip_low must be in [0, 1)") is None


def test_bugs_keep_their_traceback():
  def bad_main(argv):
    raise ValueError("operands could not be broadcast together")
  with pytest.raises(ValueError, match="broadcast"):
    cli.guarded(bad_main, ["prog"])

  def buggy(argv):
    raise KeyError("params")
  with pytest.raises(KeyError):
    cli.guarded(buggy, ["prog"])


def test_user_errors_exit_2(capsys):
  def main(argv):
    raise MissingInputError("rl.init_from", "/x", "is not a directory")
  with pytest.raises(SystemExit) as info:
    cli.guarded(main, ["prog"])
  assert info.value.code == 2
  assert capsys.readouterr().err == "error: rl.init_from='/x': is not a directory\n"
  # They are still the built-in exceptions callers catch.
  assert isinstance(ConfigError("a", 1, "b"), ValueError)
  assert isinstance(MissingInputError("a", 1, "b"), FileNotFoundError)


def test_flag_parsing_errors_are_one_line():
  assert cli.flag_error_line("flag --config.rl.num_steps=abc: invalid literal for int() with "
                             "base 10: 'abc'") == \
      "--config.rl.num_steps='abc': invalid literal for int() with base 10: 'abc'"
  assert cli.flag_error_line("Unknown command line flag 'bogus'") == "--bogus: unknown flag"
  assert cli.flag_error_line("flag --config=None: Flag --config must have a value other than "
                             "None.") == "--config: is required"
  assert cli.flag_error_line(  # a config file that raises while loading: its last line
      "flag --config=c.py:huge: Error whilst parsing config file:\n\n  Traceback (most "
      "recent call last):\n  ...\n  ValueError: unknown variant 'huge'\n") == \
      "--config='c.py:huge': ValueError: unknown variant 'huge'"


@pytest.mark.parametrize("args,expected", [
    (["--config.rl.num_generation=4"], "error: --config.rl.num_generation='4': the config has "
     "no field 'num_generation' (did you mean 'num_generations'?)"),
    (["--config.rl.num_steps=abc"],
     "error: --config.rl.num_steps='abc': invalid literal for int() with base 10: 'abc'"),
])
def test_bad_overrides_are_one_line_and_touch_nothing(tmp_path, args, expected):
  proc = _run(["experiments/train_rl.py", "--config=configs/grpo_arithmetic.py:tiny",
               f"--workdir={tmp_path / 'run'}", *args])
  _assert_one_line_error(proc, expected)
  assert not (tmp_path / "run").exists()


def test_a_config_file_that_does_not_exist_is_one_line(tmp_path):
  proc = _run(["experiments/evaluate.py", "--config=configs/nope.py", "--checkpoint=/x",
               f"--workdir={tmp_path / 'eval'}"])
  _assert_one_line_error(proc, "error: --config='configs/nope.py': cannot be loaded ([Errno 2] "
                               "No such file or directory: 'configs/nope.py')")
  assert not (tmp_path / "eval").exists()
