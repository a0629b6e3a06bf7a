"""The tools' user errors (plot_seeds, rollout_trend, build_tokenizer, build_eval_sets,
launch/supervise.py): one `error: <field>=<value>: <problem>` line, no traceback."""

import os
import subprocess
import sys

import pytest

from experiments.demo import rollout_trend, seed_plots
from launch import supervise
from rl_post.data import build_tokenizer
from rl_post.errors import ConfigError, MissingInputError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("text, problem", [
    ("not json", "is not a JSON file"),
    ('{"rows": 3}', "is not a seeds.json"),
    ("[]", "is not a seeds.json"),
    ('{"rows": [{"seed": 0}]}', "no control-arm tables"),
])
def test_a_bad_seeds_json_is_named(tmp_path, text, problem):
  path = tmp_path / "seeds.json"
  path.write_text(text)
  with pytest.raises(MissingInputError, match=problem) as e:
    seed_plots.load_seeds(str(path))
  assert e.value.field == "--seeds_json" and e.value.value == str(path)


def test_a_metrics_dir_without_seed_names_the_flag(tmp_path):
  with pytest.raises(ConfigError, match="needs '{seed}'") as e:
    seed_plots.write({"rows": [{"seed": 0}]}, str(tmp_path), str(tmp_path / "out"))
  assert e.value.field == "--metrics_dir"


def _metrics(folder, text):
  folder.mkdir(parents=True)
  (folder / "metrics.jsonl").write_text(text)
  return str(folder)


def test_rollout_trend_names_bad_flags_and_garbled_files(tmp_path):
  good = _metrics(tmp_path / "good", '{"step": 1}\n')
  with pytest.raises(ConfigError) as e:
    rollout_trend.trend_tables([good], window=0)
  assert e.value.field == "--window"
  for runs in ([], [""]):
    with pytest.raises(ConfigError, match="names no RL workdir"):
      rollout_trend.trend_tables(runs, window=2)
  with pytest.raises(MissingInputError, match="no metrics file") as e:
    rollout_trend.trend_tables([good, str(tmp_path / "nope")], window=2)
  assert e.value.field == "--runs"
  garbled = _metrics(tmp_path / "garbled", '{"step": 1}\ngarbage\n{"step": 3}\n')
  with pytest.raises(MissingInputError, match=r"garbled/metrics.jsonl: line 2 ") as e:
    rollout_trend.trend_tables([garbled], window=2)
  assert e.value.field == "--runs" and e.value.value == garbled
  assert "Rollout pass rate (%)" in rollout_trend.trend_tables([good], window=2)[0]


def _tokenizer_config(path, vocab_size=384):
  from configs import tokenizer
  config = tokenizer.get_config("tiny")
  config.tokenizer.update(path=str(path), vocab_size=vocab_size)
  return config


def test_build_tokenizer_names_an_unwritable_path(tmp_path):
  (tmp_path / "x.model").mkdir()
  with pytest.raises(ConfigError, match="is a directory") as e:
    build_tokenizer.build(_tokenizer_config(tmp_path / "x.model"))
  assert e.value.field == "tokenizer.path"
  (tmp_path / "file").write_text("")
  with pytest.raises(ConfigError, match="cannot be created") as e:
    build_tokenizer.build(_tokenizer_config(tmp_path / "file" / "sub" / "a.model"))
  assert e.value.field == "tokenizer.path"


def test_build_tokenizer_reports_sentencepieces_minimum_vocab_size(tmp_path, monkeypatch):
  # Every character of the corpus needs a piece (character_coverage=1.0): 40 CJK
  # characters push SentencePiece's minimum past the static floor of 279.
  lines = ["".join(chr(0x4E00 + i) for i in range(40))] * 5 + ["12+3=15"] * 20
  monkeypatch.setattr(build_tokenizer, "domain_corpus", lambda mixture, n: iter(lines))
  with pytest.raises(ConfigError, match=r"must be >= \d+ for this corpus") as e:
    build_tokenizer.build(_tokenizer_config(tmp_path / "a.model", vocab_size=279))
  assert e.value.field == "tokenizer.vocab_size" and e.value.value == 279
  with pytest.raises(ConfigError, match="must be >= 279") as e:
    build_tokenizer.build(_tokenizer_config(tmp_path / "a.model", vocab_size=200))
  assert e.value.field == "tokenizer.vocab_size"


def _run(script, *flags):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", script), *flags],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_entry_points_name_an_output_folder_that_cannot_be_made(tmp_path):
  (tmp_path / "file").write_text("")
  recorded = os.path.join("experiments", "results", "demo_short_first")
  proc = _run("plot_seeds.py", f"--seeds_json={recorded}/seeds.json",
              f"--metrics_dir={recorded}/seed_{{seed}}_rl", f"--out_dir={tmp_path}/file/out")
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.splitlines() == [
      f"error: --out_dir='{tmp_path}/file/out': cannot be created (Not a directory)"]
  proc = _run("build_eval_sets.py", "--config=configs/grpo_arithmetic.py:tiny",
              f"--config.tasks.eval_data_dir={tmp_path}/file",
              "--config.tasks.eval_sets=('arithmetic',)")
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.splitlines()[-1] == (
      f"error: tasks.eval_data_dir='{tmp_path}/file': is a file, not a directory")


def test_supervise_rejects_what_cannot_run_in_one_line(tmp_path, capsys):
  assert supervise.supervise([str(tmp_path / "no_such_cmd")], 3, base_backoff_s=0) == 2
  assert capsys.readouterr().err == (f"error: command='{tmp_path}/no_such_cmd': cannot be "
                                     "started (No such file or directory)\n")
  for flag in ("--backoff_s=nan", "--max_backoff_s=inf", "--backoff_s=-1"):
    assert supervise.main(["--restart_on_failure=1", flag, "--", "true"]) == 2, flag
    assert capsys.readouterr().err.startswith(f"error: {flag.split('=')[0]}="), flag


def test_supervise_keeps_restarting_when_the_workdir_cannot_be_written(tmp_path, capsys):
  (tmp_path / "file").write_text("")
  workdir = str(tmp_path / "file" / "run")
  flaky = ("import os, sys\n"
           f"marker = {str(tmp_path / 'ran')!r}\n"
           "first = not os.path.exists(marker)\n"
           "open(marker, 'w').close()\n"
           "sys.exit(1 if first else 0)\n")
  command = [sys.executable, "-c", flaky, f"--workdir={workdir}"]
  assert supervise.supervise(command, 2, base_backoff_s=0) == 0
  err = capsys.readouterr().err
  assert "cannot write" in err and '"restart": 1' in err and "restart 1/2" in err
