"""A workdir rerun with a config its checkpoints do not fit: one clear error, the
workdir's own config.json kept (a resume that crashed after overwriting it left a
workdir that could no longer be evaluated or resumed)."""

import json
import os
import shutil
import types

import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_fixtures import DIGIT_DOMAIN
from rl_post.data import tokenizer_fingerprint
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.errors import ConfigError
from rl_post.rl import start_state
from rl_post.rl import trainer as rl_trainer
from rl_post.sft import trainer as sft_trainer
from rl_post.training import run


def _sft_config(tokenizer_path):
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.sft.update(num_steps=2, batch_size=4, checkpoint_every=2)
  return c


def _rl_config(tokenizer_path):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=8)
  c.rl.update(max_prompt_len=24, max_new_tokens=4, batch_size=2, num_generations=2,
              num_steps=1, checkpoint_every=1, eval_every=0)
  c.rewards.num_workers = 0
  return c


@pytest.fixture(scope="module")
def sft_workdir(tokenizer_path, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("sft"))
  sft_trainer.train(_sft_config(tokenizer_path), workdir)
  return workdir


def _config_json(workdir):
  with open(os.path.join(workdir, "config.json")) as f:
    return json.load(f)


def test_resume_with_another_model_names_the_change_and_keeps_config_json(
    tokenizer_path, sft_workdir):
  before = _config_json(sft_workdir)
  c = _sft_config(tokenizer_path)
  c.model.num_layers = before["model"]["num_layers"] + 1
  c.sft.num_steps = 4
  with pytest.raises(ConfigError) as e:
    sft_trainer.train(c, sft_workdir)
  assert e.value.field == "--workdir"
  layers = before["model"]["num_layers"]
  assert f"model.num_layers: {layers} -> {layers + 1}" in e.value.problem
  assert _config_json(sft_workdir) == before


def test_another_kind_of_run_on_the_workdir_is_refused(tokenizer_path, sft_workdir, tmp_path):
  before = _config_json(sft_workdir)
  with pytest.raises(ConfigError, match="another kind of run's checkpoints"):
    rl_trainer.train(_rl_config(tokenizer_path), sft_workdir)
  assert _config_json(sft_workdir) == before
  rl_workdir = str(tmp_path / "rl")
  rl_trainer.train(_rl_config(tokenizer_path), rl_workdir)
  with pytest.raises(ConfigError, match="holds an RL run's checkpoints"):
    sft_trainer.train(_sft_config(tokenizer_path), rl_workdir)
  fewer = _rl_config(tokenizer_path)
  fewer.rl.num_steps = 0  # the run is at step 1 (a Progress traceback before)
  with pytest.raises(ConfigError, match=r"is below the step the run .* has reached \(1\)"):
    rl_trainer.train(fewer, rl_workdir)
  assert _config_json(rl_workdir)["rl"]["num_steps"] == 1


def test_a_file_where_the_checkpoints_go_is_a_workdir_error(tmp_path):
  (tmp_path / "checkpoints").write_text("x")
  with pytest.raises(ConfigError, match="has a file named 'checkpoints'"):
    run.check_run_layout(str(tmp_path))
  (tmp_path / "checkpoints").unlink()
  (tmp_path / "config.json").mkdir()
  with pytest.raises(ConfigError, match="has a directory named 'config.json'"):
    run.check_run_layout(str(tmp_path))


@run.scoped_run
def _initial_params(config, workdir):
  ctx = run.setup_run(config, workdir)
  return start_state.initial_params(ctx, types.SimpleNamespace(init_from=config.rl.init_from))


def test_init_from_checks_the_params_shape_not_how_they_are_run(
    tokenizer_path, sft_workdir, tmp_path):
  c = _rl_config(tokenizer_path)
  c.rl.init_from = os.path.join(sft_workdir, "export")
  c.model.attention_impl = "xla"  # an export made with "auto" serves any attention
  assert _initial_params(c, str(tmp_path / "a")) is not None
  c.model.num_layers += 1
  with pytest.raises(ConfigError) as e:
    _initial_params(c, str(tmp_path / "b"))
  assert e.value.field == "rl.init_from"
  assert e.value.problem.startswith("holds a model that differs from config.model in "
                                    "{'num_layers'")


class _Swapped:
  """`tokenizer` with the pieces of ids 5 and 6 swapped: same size, other pieces."""

  def __init__(self, tokenizer):
    self._t = tokenizer
    self.vocab_size, self.pad_id, self.bos_id, self.eos_id = (
        tokenizer.vocab_size, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)

  def piece(self, i):
    return self._t.piece({5: 6, 6: 5}.get(i, i))


def test_a_model_is_run_only_with_the_tokenizer_it_was_trained_with(
    tokenizer, tokenizer_path, sft_workdir, tmp_path):
  export = os.path.join(sft_workdir, "export")
  stored = tokenizer_fingerprint.read(export)
  assert stored == tokenizer_fingerprint.of(tokenizer)
  tokenizer_fingerprint.check(stored, tokenizer, "rl.init_from", export, tokenizer_path)
  with pytest.raises(ConfigError, match="both .* pieces, but not the same ones"):
    tokenizer_fingerprint.check(stored, _Swapped(tokenizer), "rl.init_from", export, "t.model")
  # an export whose tokenizer differs: RL refuses to start from it
  other = tmp_path / "export"
  shutil.copytree(export, other)
  (other / tokenizer_fingerprint.FILENAME).write_text(json.dumps(
      dict(stored, sha256="0" * 64)))
  c = _rl_config(tokenizer_path)
  c.rl.init_from = str(other)
  with pytest.raises(ConfigError) as e:
    _initial_params(c, str(tmp_path / "run"))
  assert e.value.field == "tokenizer.path" and f"rl.init_from={str(other)!r}" in e.value.problem
  os.remove(other / tokenizer_fingerprint.FILENAME)  # an export from before fingerprints
  assert _initial_params(c, str(tmp_path / "run2")) is not None


def test_a_tokenizer_of_another_size_is_named_not_reported_as_a_shape_mismatch(
    tokenizer, sft_workdir, tmp_path):
  from configs import base
  from rl_post.data import build_tokenizer
  from rl_post.evaluate import checkpoint_eval
  from rl_post.parallel import mesh as mesh_lib
  other_config = base.get_base()
  other_config.tokenizer.update(path=str(tmp_path / "other.model"), corpus_examples=2000,
                                vocab_size=tokenizer.vocab_size - 4)  # the corpus needs 291
  other = build_tokenizer.build(other_config)
  sizes = f"that one had {tokenizer.vocab_size} pieces, this one {other.vocab_size}"
  before = _config_json(sft_workdir)
  c = _sft_config(other_config.tokenizer.path)
  c.sft.num_steps = 4
  with pytest.raises(ConfigError) as e:  # the embedding's shape differs: restore fails first
    sft_trainer.train(c, sft_workdir)
  assert e.value.field == "tokenizer.path" and sizes in e.value.problem
  assert _config_json(sft_workdir) == before
  with pytest.raises(ConfigError) as e:
    checkpoint_eval.load_checkpoint(sft_workdir, c, other, mesh_lib.make_mesh(dict(c.mesh)),
                                    tuple(tuple(r) for r in c.sharding_rules))
  assert e.value.field == "tokenizer.path" and f"--checkpoint={sft_workdir!r}" in e.value.problem
  assert sizes in e.value.problem


def test_every_tokenizer_kind_has_a_fingerprint():
  # the episodes' call-vocabulary tokenizer has no bos_id (every episodes run crashed)
  calls = tokenizer_fingerprint.of(CallVocabTokenizer(copies=2))
  assert calls["vocab_size"] == CallVocabTokenizer(copies=2).vocab_size
  assert calls != tokenizer_fingerprint.of(CallVocabTokenizer(copies=3))


def test_resume_with_other_settings_records_them_in_config_history(tokenizer_path, tmp_path):
  workdir = str(tmp_path / "sft")
  sft_trainer.train(_sft_config(tokenizer_path), workdir)
  history = os.path.join(workdir, run.CONFIG_HISTORY)
  sft_trainer.train(_sft_config(tokenizer_path), workdir)  # same settings: nothing to record
  assert not os.path.exists(history)
  c = _sft_config(tokenizer_path)
  rate = c.optimizer.learning_rate
  c.sft.num_steps, c.optimizer.learning_rate = 3, rate / 2
  sft_trainer.train(c, workdir)
  with open(history) as f:
    records = [json.loads(line) for line in f]
  assert records == [{"step": 2, "changes": {"optimizer.learning_rate": [rate, rate / 2],
                                             "sft.num_steps": [2, 3]}}]
  assert _config_json(workdir)["optimizer"]["learning_rate"] == rate / 2
