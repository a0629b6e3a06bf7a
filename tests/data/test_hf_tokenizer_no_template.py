"""A tokenizer.json without a chat template loads and falls back to ChatML.

Regression: the `chat_template` parameter of `HFTokenizer` shadowed the
`chat_template` module, so every tokenizer without a template crashed.
"""


from rl_post.data import chat_template, hf_tokenizer
from tiny_pretrained import write_bpe_tokenizer


def _write_tokenizer(directory, config: dict):
  write_bpe_tokenizer(str(directory), ["What is 2 + 3? The answer is 5."] * 10, 300, config)


def test_tokenizer_json_without_chat_template(tmp_path):
  _write_tokenizer(tmp_path, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
  tok = hf_tokenizer.load_tokenizer(str(tmp_path / "tokenizer.json"))
  assert tok.chat_template == chat_template.CHATML
  assert tok.chat_prompts is False  # no template shipped: prompts stay plain text
  text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}])
  assert text == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
  assert tok.decode(tok.encode(text), skip_special_tokens=False) == text
  assert tok.eos_id == tok.token_id("<|im_end|>")
