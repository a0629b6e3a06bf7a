"""A tiny "pretrained" chat model on disk: byte-level BPE tokenizer.json with a ChatML
template and a random 2-layer model saved by our own `hf.save` (no downloads)."""

import json
import os

import jax

TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}"
            "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = ["What is 7+8? End your response with the answer as a number. 7 + 8 = 15.",
          "The answer is 4. Answer: 12. 0 1 2 3 4 5 6 7 8 9 plus minus"] * 20


def write_bpe_tokenizer(directory, corpus, vocab_size: int, tokenizer_config: dict):
  """A byte-level BPE tokenizer.json trained on `corpus` (specials <|endoftext|>,
  <|im_start|>, <|im_end|>) and its tokenizer_config.json, in `directory`; the tokenizer."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[
      "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(corpus, trainer)
  os.makedirs(directory, exist_ok=True)
  tok.save(os.path.join(directory, "tokenizer.json"))
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump(tokenizer_config, f)
  return tok


def save(directory: str) -> str:
  """Writes the tokenizer and model into `directory` (an HF checkpoint folder); returns it."""
  from rl_post import models as our_models
  from rl_post.models import hf
  tok = write_bpe_tokenizer(directory, CORPUS, 320, {
      "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE,
      "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None})
  config = our_models.ModelConfig(vocab_size=tok.get_vocab_size(), num_layers=2, embed_dim=32,
                                  num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
                                  tie_embeddings=True)
  hf.save(directory, config, our_models.init_params(config, jax.random.key(0)))
  return directory
