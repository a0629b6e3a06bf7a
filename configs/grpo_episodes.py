"""GRPO over multi-turn tool-use episodes (python, bash, sql in the strict sandbox).

  python experiments/train_rl.py --config=configs/grpo_episodes.py --workdir=/tmp/rl_post/ep
  # PPO with a value head instead (any registry algorithm works):
  python experiments/train_rl.py --config=configs/grpo_episodes.py --workdir=/tmp/rl_post/ep_ppo \
      --config.rl.algorithm=ppo
  # CPU run of the tiny random model (tool-call success and reward rise; docs/envs.md):
  python experiments/train_rl.py --config=configs/grpo_episodes.py:tiny --workdir=/tmp/ep_tiny

Each rollout round runs rl.batch_size tasks x rl.num_generations episodes
of the `episodes.domains` (rl_post/envs/trainer_rounds.py);
rl.max_new_tokens is one episode's whole token budget (model turns plus
tool responses), episodes.turn_tokens one turn's. The model is the tiny one
of configs/base.py with random weights and the call-vocabulary tokenizer
(each tool call one token), so it makes calls from step 0; the reward adds
`call_success_weight` x the fraction of successful calls to the verifier's
score, which a random model does not reach. For a pretrained model see
configs/smollm2_135m_episodes.py.
"""

from configs import base


def episodes_section(**overrides) -> dict:
  section = dict(enabled=True, domains=("data_questions", "fs_chores", "repo_repair"),
                 tools=(),  # extra tools for every domain: names or "module:Class"
                 difficulties=(1,), max_turns=4, turn_tokens=48, call_success_weight=0.5,
                 tokenizer="call_vocab", call_vocab_copies=4, chat_template="auto",
                 stop_check_interval=8,
                 limits=dict(per_call_s=5.0, per_episode_s=30.0, max_output_chars=400),
                 sandbox=dict(num_workers=2, timeout_s=10.0),
                 heldout_size=0, heldout_difficulties=(), heldout_ks=(1, 4))
  section.update(overrides)
  return section


def get_config(variant: str = ""):
  c = base.get_base()
  # held out: 2 tasks of each domain and level 1-3, apart from training (which draws level 1)
  c.episodes = episodes_section(heldout_size=18, heldout_difficulties=(1, 2, 3))
  c.tasks.heldout_size = 0   # the single-turn held-out set; episodes have episodes.heldout_size
  c.rewards.num_workers = 0  # the reward pool is unused (episodes score themselves)
  # prompts (tool list and protocol, one token per character) are 470-620 tokens
  c.rl.update(num_steps=40, batch_size=4, num_generations=4, max_prompt_len=1024,
              max_new_tokens=256, eval_every=0, checkpoint_every=10)
  c.rl.grpo.update(aggregation="token_mean")
  c.optimizer = dict(learning_rate=1e-2, schedule="constant", warmup_steps=0, total_steps=40,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    # ~8 s a step on a shared 2-core CPU: 2 tasks x 4 episodes of <= 3 turns
    c.model.update(num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=8,
                   mlp_dim=64)
    c.episodes = episodes_section(domains=("data_questions",), max_turns=3, turn_tokens=24,
                                  call_success_weight=1.0)
    c.rl.update(num_steps=6, batch_size=2, num_generations=4, max_new_tokens=128,
                checkpoint_every=3)
    c.optimizer.update(learning_rate=3e-2, total_steps=6)
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
