"""Episodes through a tokenizer's chat template (pretrained models).

`chat_encoders(tokenizer)` returns the two encoders `run_episodes` takes:
the first observation becomes a user message rendered with the generation
prompt; a tool response becomes the template's text between the end of
the model's turn and the start of its next one: the assistant turn's end
marker, a `tool` message with the response, and the assistant header.
That text is found by rendering [user, assistant(sentinel), tool] with
the generation prompt and keeping what follows the sentinel, so it is
exactly what the template would produce for the whole conversation. The
`tool` message's content is the response text as the environment formats
it (`<tool_response>...</tool_response>`). A template that cannot render
a `tool` message, or that does not place its content verbatim, is
reported when the encoders are built.

Tool output is data: the template's own framing around the tool message is
encoded with the tokenizer's special tokens (its turn markers stay
special), the message's content with them off (`protocol.text_encoder`),
so a response that prints `<|im_end|>` or `<|im_start|>` cannot end the
turn or open a new one.
"""

from rl_post.envs import protocol

_SENTINEL = "\x00rl_post_assistant_turn\x00"
_CONTENT = "\x00rl_post_tool_content\x00"


def _observation_suffix(tokenizer, content):
  text = tokenizer.apply_chat_template(
      [{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL},
       {"role": "tool", "content": content}], add_generation_prompt=True)
  cut = text.find(_SENTINEL)
  if cut < 0:
    raise ValueError("the chat template drops assistant content; cannot place tool responses")
  return text[cut + len(_SENTINEL):]


def chat_encoders(tokenizer):
  """(encode_prompt, encode_observation) for `run_episodes`.

  Raises:
    ValueError: the template cannot render a tool message or changes its
      content; the tokenizer has no `encode_text`.
  """
  encode_text = protocol.text_encoder(tokenizer)
  try:
    framing = _observation_suffix(tokenizer, _CONTENT)
    probe = _observation_suffix(tokenizer, "probe")
  except Exception as e:  # a template error names the missing role support
    raise ValueError(f"the chat template cannot render a tool message: {e}") from e
  if "probe" not in probe:
    raise ValueError("the chat template drops tool messages")
  head, _, tail = framing.partition(_CONTENT)
  if framing.count(_CONTENT) != 1 or probe != head + "probe" + tail:
    raise ValueError("the chat template changes tool message content; cannot place tool "
                     "responses as plain text")
  head_ids, tail_ids = tokenizer.encode(head), tokenizer.encode(tail)

  def encode_prompt(text):
    return tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True))

  def encode_observation(observation):
    return head_ids + encode_text(observation.strip("\n")) + tail_ids

  return encode_prompt, encode_observation
