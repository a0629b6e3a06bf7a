"""Single-turn domains as tool-free episodes; tool responses through chat templates."""

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.data import chat_template
from rl_post.envs import driver, protocol
from rl_post.envs.base import SingleTurnEnv
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.envs.chat import chat_encoders
from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling.sampler import SamplingConfig
from rl_post.tasks import registry


def test_single_turn_domain_is_the_no_tool_case(sandbox):
  domain = registry.make_domain("arithmetic")
  tasks = [domain.generate(np.random.default_rng(i), 1) for i in range(4)]
  envs = [SingleTurnEnv(domain) for _ in tasks]
  assert envs[0].reset(tasks[0]) == tasks[0].prompt
  # Even a turn that looks like a tool call ends the episode: there are no tools.
  observation, done, info = envs[0].step(protocol.format_call("bash", {"command": "ls"}), None)
  assert done and observation == "" and not info.called
  good = lambda task, obs: domain.demonstration(task)
  assert driver.run_text_episodes(envs, tasks, good, sandbox) == [1.0] * 4
  bad = lambda task, obs: "<answer>nonsense</answer>"
  assert driver.run_text_episodes(envs, tasks, bad, sandbox) == [0.0] * 4
  with pytest.raises(RuntimeError, match="finished episode"):
    envs[0].step("more", sandbox)


class ChatTokenizer(CallVocabTokenizer):
  template = chat_template.CHATML

  def apply_chat_template(self, messages, *, add_generation_prompt=True):
    return chat_template.render(self.template, messages,
                                add_generation_prompt=add_generation_prompt, bos_token="",
                                eos_token="")


def test_chat_encoders_place_tool_responses_between_assistant_turns():
  tok = ChatTokenizer()
  encode_prompt, encode_observation = chat_encoders(tok)
  assert tok.decode(encode_prompt("hi")) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
  text = tok.decode(encode_observation(protocol.format_response("out")))
  assert text == ("<|im_end|>\n<|im_start|>tool\n<tool_response>\nout\n</tool_response>"
                  "<|im_end|>\n<|im_start|>assistant\n")
  no_tools = ChatTokenizer()
  no_tools.template = ("{% for m in messages %}{% if m['role'] == 'tool' %}"
                       "{{ raise_exception('no tool role') }}{% endif %}{{ m['content'] }}"
                       "{% endfor %}")
  with pytest.raises(ValueError, match="tool message"):
    chat_encoders(no_tools)


def test_chat_episodes_keep_the_logprob_contract(sandbox):
  tok = ChatTokenizer(copies=8)
  config = models.ModelConfig(vocab_size=tok.vocab_size, num_layers=1, embed_dim=32,
                              num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64)
  params = models.init_params(config, jax.random.key(1))
  tasks = [DOMAINS["data_questions"].generate(np.random.default_rng(i), 1) for i in range(4)]
  envs = [make_env("data_questions") for _ in tasks]
  encode_prompt, encode_observation = chat_encoders(tok)
  sampling = SamplingConfig(max_new_tokens=256, stop_check_interval=4)
  result = run_episodes(params, envs, tasks, tokenizer=tok, model_config=config,
                        sampling=sampling, sandbox=sandbox, seeds_B=[3, 4, 5, 6],
                        config=EpisodeConfig(max_turns=3, turn_tokens=32),
                        encode_prompt=encode_prompt, encode_observation=encode_observation)
  r = result.rollout
  appended = (r.mask_BxT == 1) & (r.loss_mask_BxT == 0)
  assert appended.sum() > 0
  texts = [tok.decode(r.tokens_BxT[b][appended[b]]) for b in range(4)]
  assert any("<|im_start|>tool\n<tool_response>" in t for t in texts)
  logp, _ = sequence_logprobs(config, params, r.tokens_BxT, sampling.temperature)
  trainable = r.loss_mask_BxT.astype(bool)
  assert float(np.abs(np.where(trainable, np.asarray(logp) - r.logp_BxT, 0.0)).max()) <= 1e-5
