"""Runs one episode batch (for test_resume.py): python resume_child.py OUT [CKPT [KILL_AFTER]].

With KILL_AFTER, the process SIGKILLs itself right after writing its
KILL_AFTER-th checkpoint, as a crash or preemption would.
"""

import os
import signal
import sys

import jax
import numpy as np

from rl_post import models
from rl_post.envs import resume
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.sampling.sampler import SamplingConfig
from rl_post.sandbox import Sandbox, SandboxConfig


def main(out, checkpoint=None, kill_after=0):
  if kill_after:
    real_save, saves = resume.save, []

    def save_then_die(path, snapshot):
      real_save(path, snapshot)
      saves.append(path)
      if len(saves) == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)

    resume.save = save_then_die
  tok = CallVocabTokenizer(copies=6)
  config = models.ModelConfig(vocab_size=tok.vocab_size, num_layers=1, embed_dim=32,
                              num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64)
  params = models.init_params(config, jax.random.key(0))
  rng = np.random.default_rng(0)
  tasks = [DOMAINS["data_questions"].generate(rng, 1) for _ in range(4)]
  envs = [make_env("data_questions") for _ in tasks]
  with Sandbox(SandboxConfig(num_workers=1)) as sandbox:
    result = run_episodes(params, envs, tasks, tokenizer=tok, model_config=config,
                          sampling=SamplingConfig(max_new_tokens=192, stop_check_interval=4),
                          sandbox=sandbox, seeds_B=[5, 6, 7, 8],
                          config=EpisodeConfig(max_turns=5, turn_tokens=24),
                          checkpoint_path=checkpoint)
  r = result.rollout
  np.savez(out, tokens=r.tokens_BxT, logp=r.logp_BxT, loss_mask=r.loss_mask_BxT,
           mask=r.mask_BxT, rewards=result.rewards_B, turns=result.turns_B,
           calls=result.calls_B, transcripts=np.array([e.transcript for e in envs]))


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None,
       int(sys.argv[3]) if len(sys.argv) > 3 else 0)
