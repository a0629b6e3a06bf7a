"""One tokenizer interface: SentencePiece, tokenizer.json and GGUF, with chat templates."""

import pytest

from rl_post.data import batching, hf_tokenizer
from rl_post.data.chat_template import TemplateError
from tiny_pretrained import TEMPLATE, write_bpe_tokenizer


MESSAGES = [{"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "5"}, {"role": "user", "content": "And 4 + 4?"}]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  """A small byte-level BPE tokenizer.json + tokenizer_config.json, trained here."""
  directory = tmp_path_factory.mktemp("hf_tok")
  write_bpe_tokenizer(str(directory), ["What is 2 + 3? The answer is 5.",
                                       "Be brief and say it."] * 20, 400, {
      "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE,
      "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None})
  return directory


def test_tokenizer_json_matches_transformers(hf_dir):
  import transformers
  ours = hf_tokenizer.load_tokenizer(str(hf_dir))
  theirs = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
  assert (ours.eos_id, ours.pad_id, ours.bos_id) == (2, 0, -1)
  prompt = ours.apply_chat_template(MESSAGES)
  assert prompt == theirs.apply_chat_template(MESSAGES, tokenize=False,
                                               add_generation_prompt=True)
  assert ours.apply_chat_template(MESSAGES, add_generation_prompt=False) == \
      theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=False)
  ids = ours.encode(prompt)
  assert ids == theirs.encode(prompt, add_special_tokens=False)
  assert ids.count(ours.eos_id) == 4  # <|im_end|> is one atomic token per turn
  assert ours.decode(ids, skip_special_tokens=False) == prompt
  assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)


def test_sentencepiece_has_the_same_interface(tokenizer):
  tok = hf_tokenizer.load_tokenizer(tokenizer.model_path)
  prompt = tok.apply_chat_template(MESSAGES[:1])
  assert prompt == "user: What is 2 + 3?\nassistant: "
  assert tok.decode(tok.encode(prompt)) == prompt
  # task prompts keep their plain layout with our own tokenizers
  assert batching.prompt_ids(tok, "2+3=") == [tok.bos_id] + tok.encode("2+3=\n")


def test_task_prompts_use_the_chat_template(hf_dir):
  tok = hf_tokenizer.load_tokenizer(str(hf_dir))
  assert tok.chat_prompts
  ids = batching.prompt_ids(tok, "What is 2 + 3?")
  assert ids == tok.encode(tok.apply_chat_template(MESSAGES[:1]))
  assert tok.decode(ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n")


def test_a_configured_system_prompt_replaces_the_templates_default(hf_dir, tokenizer):
  from rl_post.errors import ConfigError
  tok = hf_tokenizer.load_tokenizer(str(hf_dir))
  default = tok.decode(batching.prompt_ids(tok, "What is 2 + 3?"), skip_special_tokens=False)
  assert default.startswith("<|im_start|>system\nBe brief.<|im_end|>")
  batching.configure_prompts(tok, {"system_prompt": "End with the number."})
  told = tok.decode(batching.prompt_ids(tok, "What is 2 + 3?"), skip_special_tokens=False)
  assert told == ("<|im_start|>system\nEnd with the number.<|im_end|>\n<|im_start|>user\n"
                  "What is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
  batching.configure_prompts(tok, {"path": "x"})  # absent: the template's own default again
  assert tok.decode(batching.prompt_ids(tok, "What is 2 + 3?"),
                    skip_special_tokens=False) == default
  with pytest.raises(ConfigError, match="tokenizer.system_prompt.*must be a string"):
    batching.configure_prompts(tok, {"system_prompt": 3})
  sentencepiece = hf_tokenizer.load_tokenizer(tokenizer.model_path)
  with pytest.raises(ConfigError, match="tokenizer.system_prompt.*needs a tokenizer with a chat"):
    batching.configure_prompts(sentencepiece, {"system_prompt": "Be brief."})


def test_bad_messages_and_templates(hf_dir):
  tok = hf_tokenizer.load_tokenizer(str(hf_dir / "tokenizer.json"))
  with pytest.raises(ValueError, match=r"messages\[1\] needs a string 'content'"):
    tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant"}])
  tok.chat_template = "{{ raise_exception('only user turns') }}"
  with pytest.raises(TemplateError, match="only user turns"):
    tok.apply_chat_template(MESSAGES)
  tok.chat_template = "{% for m in messages %}"
  with pytest.raises(TemplateError, match="does not parse"):
    tok.apply_chat_template(MESSAGES)


class _Field:
  def __init__(self, value):
    self.value = value

  def contents(self):
    return self.value


class _Reader:
  def __init__(self, **fields):
    self.fields = {k.replace("__", "."): _Field(v) for k, v in fields.items()}


def test_bad_tokenizer_inputs_are_named(tmp_path):
  with pytest.raises(ValueError, match="unknown tokenizer path"):
    hf_tokenizer.load_tokenizer(str(tmp_path / "vocab.txt"))
  with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
    hf_tokenizer.load_tokenizer(str(tmp_path))
  with pytest.raises(ValueError, match="unsupported GGUF tokenizer model 'llama'"):
    hf_tokenizer.from_gguf(_Reader(tokenizer__ggml__model="llama"))
  reader = _Reader(tokenizer__ggml__model="gpt2", tokenizer__ggml__tokens=["a", "b", "ab"],
                   tokenizer__ggml__merges=["a b"], tokenizer__ggml__pre="falcon")
  with pytest.raises(ValueError, match="unsupported GGUF pre-tokenizer 'falcon'"):
    hf_tokenizer.from_gguf(reader)
