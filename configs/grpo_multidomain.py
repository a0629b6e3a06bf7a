"""GRPO on a mixture of seven domains, two of them verified in the sandbox.

arithmetic, countdown, extraction, two reasoning-gym generators, and code
and sql, whose answers run in each reward worker's shared strict sandbox.
Domain weights with a floor share, difficulty levels 1-2 under the adaptive
curriculum, dynamic filtering, and reward component weights per domain.
The tokenizer is trained on these domains' prompts and demonstrations
(its own file, multidomain.model); configs/sft_multidomain.py teaches the
answer format first. Results and commands: docs/multidomain.md.

  python experiments/build_tokenizer.py --config=configs/grpo_multidomain.py
  python experiments/train_sft.py --config=configs/sft_multidomain.py \
      --workdir=/tmp/rl_post/multi_sft
  python experiments/train_rl.py --config=configs/grpo_multidomain.py \
      --workdir=/tmp/rl_post/multi_grpo --config.rl.init_from=/tmp/rl_post/multi_sft/export
  # CPU smoke run (tests/rl/test_multidomain_run.py): the same commands with :tiny
"""

from configs import base

DOMAINS = ("arithmetic", "countdown", "extraction", "rg/basic_arithmetic", "rg/spell_backward",
           "code", "sql")
SANDBOXED = ("code", "sql")  # verified by executing the answer in the sandbox
WEIGHTS = (1.0, 1.5, 1.0, 0.5, 0.5, 2.0, 1.5)
# Outcome is each verdict's score (code: the fraction of unit tests passed); domains add
# shaping components of their own. Every component is logged as reward/<domain>/<name>.
REWARD_WEIGHTS = dict(
    default=dict(outcome=1.0, format=0.1),
    countdown=dict(uses_numbers=0.1),
    extraction=dict(json_valid=0.05),
    code=dict(format=0.05),
)


def common(c, variant: str):
  """The tokenizer, model and tasks every multi-domain stage shares."""
  c.tokenizer.update(path="/tmp/rl_post/tokenizer/multidomain.model", vocab_size=1024,
                     corpus_examples=8000)
  c.tasks.domains = DOMAINS
  c.tasks.weights = WEIGHTS
  c.tasks.floors = (0.05,)
  # Levels 1-2 of every domain (extraction's level 3 needs ~700 tokens). The curriculum
  # starts each domain at level 1 and moves it to 2 once its pass rate tops `high`.
  c.tasks.difficulties = (1, 2)
  c.tasks.difficulty_ratios = ()
  c.tasks.curriculum.update(enabled=True, low=0.2, high=0.6, window=32, width=1, start=0)
  c.tasks.domain_options = {"arithmetic": dict(max_difficulty=2),
                            "code": dict(num_tests=4, timeout_s=5.0),
                            "sql": dict(timeout_s=5.0)}
  c.tasks.heldout_size = 70
  c.rewards.weights = REWARD_WEIGHTS
  c.rewards.update(num_workers=2, timeout_s=30.0)
  c.rewards.sandbox.update(num_workers=2, timeout_s=10.0)
  # Sized to finish on a shared 2-core CPU in ~10 minutes (docs/multidomain.md); on an
  # accelerator raise model.*, sft.num_steps and rl.num_steps from the command line.
  c.model.update(num_layers=2, embed_dim=96, num_heads=4, num_kv_heads=2, head_dim=24,
                 mlp_dim=256)
  if variant == "tiny":
    c.model.update(num_layers=2, embed_dim=64, mlp_dim=128, head_dim=16)
    c.tokenizer.corpus_examples = 1500
    c.tasks.heldout_size = 0  # the held-out set spans level 2 (longer prompts)
    c.rewards.num_workers = 1
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c


def get_config(variant: str = ""):
  c = common(base.get_base(), variant)
  # Prompts are up to ~300 tokens (extraction, level 2); one bucket = one compiled shape.
  # GRPO (rl.algorithm's default), token-level loss; other rl.grpo.* at their defaults.
  c.rl.update(num_steps=12, batch_size=7, num_generations=4, max_prompt_len=320,
              prompt_buckets=(320,), max_new_tokens=80, temperature=1.0, num_epochs=1,
              num_minibatches=1, eval_every=0, checkpoint_every=6, init_from="")
  c.rl.grpo.update(aggregation="token_mean")
  c.optimizer = dict(learning_rate=2e-4, schedule="constant", warmup_steps=0, total_steps=12,
                     weight_decay=0.0, grad_clip_norm=1.0)
  c.filtering = dict(enabled=True, max_rounds=1)
  if variant == "tiny":
    # Level-1 prompts only (the curriculum never moves in 3 steps): <= ~140 tokens.
    c.rl.update(num_steps=3, batch_size=7, num_generations=2, max_new_tokens=64,
                max_prompt_len=160, prompt_buckets=(160,),
                checkpoint_every=3)
    c.optimizer.total_steps = 3
  return c
