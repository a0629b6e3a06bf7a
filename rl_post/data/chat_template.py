"""Chat templates: Jinja2 rendering of a list of messages, as HF does it.

A template sees `messages` (dicts with "role" and "content"),
`add_generation_prompt`, `bos_token`, `eos_token` and `raise_exception`.
It runs in Jinja's immutable sandbox, since templates ship inside
downloaded checkpoints.
"""

import functools
from typing import Mapping, Sequence

# ChatML, used when a tokenizer ships without a template.
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
          "{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# For our own SentencePiece tokenizer, whose vocabulary has no chat tokens:
# plain role headers, one turn per line block.
PLAIN = ("{% for message in messages %}"
         "{{ message['role'] + ': ' + message['content'] + '\n' }}"
         "{% endfor %}"
         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")


class TemplateError(ValueError):
  """A chat template raised or could not be parsed."""


def _raise(message):
  raise TemplateError(message)


@functools.lru_cache(maxsize=16)
def _compile(template: str):
  from jinja2 import TemplateSyntaxError
  from jinja2.sandbox import ImmutableSandboxedEnvironment
  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
  env.globals["raise_exception"] = _raise
  try:
    return env.from_string(template)
  except TemplateSyntaxError as e:
    raise TemplateError(f"chat template does not parse: {e}") from None


def render(template: str, messages: Sequence[Mapping[str, str]], *,
           add_generation_prompt: bool = True, **special_tokens) -> str:
  """Renders `messages` with `template`; checks each message has role and content."""
  for i, message in enumerate(messages):
    for key in ("role", "content"):
      if not isinstance(message.get(key), str):
        raise ValueError(f"messages[{i}] needs a string {key!r}, got {message!r}")
  return _compile(template).render(messages=[dict(m) for m in messages],
                                   add_generation_prompt=add_generation_prompt,
                                   **special_tokens)
