"""Run setup: the vocabulary taken from the tokenizer fits the tensor axis; output path checks."""

import pytest

from configs import sft_arithmetic
from rl_post.errors import ConfigError
from rl_post.output_paths import ensure_output_file, ensure_workdir
from rl_post.training import run


class _Tok:
  vocab_size = 299


@pytest.mark.parametrize("tensor,expected", [(1, 299), (2, 300), (4, 300), (8, 304)])
def test_vocab_from_tokenizer_is_a_multiple_of_mesh_tensor(tensor, expected):
  config = sft_arithmetic.get_config("tiny")
  config.mesh.tensor = tensor
  assert run.model_config_from(config, _Tok()).vocab_size == expected


def test_configured_vocab_is_kept():
  config = sft_arithmetic.get_config("tiny")
  config.mesh.tensor = 2
  config.model.vocab_size = 301
  assert run.model_config_from(config, _Tok()).vocab_size == 301


def test_ensure_workdir(tmp_path):
  assert ensure_workdir(str(tmp_path / "a" / "b")) == str(tmp_path / "a" / "b")
  (tmp_path / "f").write_text("")
  with pytest.raises(ConfigError, match=r"--workdir=.*: is a file, not a directory"):
    ensure_workdir(str(tmp_path / "f"))
  with pytest.raises(ConfigError, match=r"--workdir=.*: cannot be created \(Not a directory\)"):
    ensure_workdir(str(tmp_path / "f" / "sub"))


def test_ensure_output_file(tmp_path):
  path = str(tmp_path / "a" / "out.json")
  assert ensure_output_file(path, "--json_out") == path
  assert (tmp_path / "a").is_dir()
  with pytest.raises(ConfigError, match=r"--json_out=.*: is a directory; name the file to write"):
    ensure_output_file(str(tmp_path), "--json_out")
  (tmp_path / "f").write_text("")
  with pytest.raises(ConfigError, match=r"--json_out=.*: its folder .* is a file, not a directory"):
    ensure_output_file(str(tmp_path / "f" / "out.json"), "--json_out")

def test_padding_ids_decode_to_nothing(tokenizer):
  ids = tokenizer.encode("12+34")
  assert tokenizer.decode(ids + [tokenizer.vocab_size, tokenizer.vocab_size + 3]) == "12+34"
