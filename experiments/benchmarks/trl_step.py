r"""TRL's GRPOTrainer whole step on grpo_step.py's synthetic workload (the TRL env only).

  /work/envs/trl/bin/python experiments/benchmarks/trl_step.py --spec=SPEC.json --out=OUT.json

The spec is whole_step.workload_spec's plus `hf_config` (our architecture as
a LlamaConfig). Prompts are the spec's token ids, fed through a word-level
tokenizer ("t<id>" per token) so TRL generates from exactly those ids;
`min_new_tokens` keeps every response at the full length (no EOS), and the
reward is the fraction of even ids, as on our side. One torch thread.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_io  # noqa: E402
from trl_side import train_timed  # noqa: E402  (sets one torch thread)

import datasets  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from transformers.tokenization_python import PythonBackend  # noqa: E402

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # ids 0-3, as in our tokenizers

class IdTokenizer(PythonBackend):
  """Token i >= 4 is the word "t<i>"; ids 0-3 are pad/unk/bos/eos. No BOS is added."""

  def __init__(self, vocab_size: int, **kwargs):
    self._size = vocab_size
    super().__init__(pad_token=SPECIALS[0], unk_token=SPECIALS[1], bos_token=SPECIALS[2],
                     eos_token=SPECIALS[3], special_tokens_pattern="none", **kwargs)

  @property
  def vocab_size(self) -> int:
    return self._size

  def get_vocab(self):
    return {self._convert_id_to_token(i): i for i in range(self._size)}

  def _tokenize(self, text, **kwargs):
    return text.split()

  def _convert_token_to_id(self, token):
    return SPECIALS.index(token) if token in SPECIALS else int(token[1:])

  def _convert_id_to_token(self, index):
    return SPECIALS[index] if index < len(SPECIALS) else f"t{index}"

  def convert_tokens_to_string(self, tokens):
    return " ".join(tokens)

def even_fraction(completions, **kwargs):
  """Fraction of even token ids in each completion (the same reward as ours)."""
  out = []
  for text in completions:
    ids = [int(w[1:]) for w in text.split()]
    out.append(sum(i % 2 == 0 for i in ids) / max(len(ids), 1))
  return out

def main(argv=None):
  spec, out = side_io.read_spec(__doc__.splitlines()[0], argv)
  tokenizer = IdTokenizer(spec["arch"]["vocab_size"])
  hf_config = transformers.LlamaConfig(**{k: v for k, v in spec["hf_config"].items()
                                          if k not in ("architectures", "model_type")})
  torch.manual_seed(spec["seed"])
  # saved and reloaded: with beta > 0 TRL builds its reference model from the model's path
  model_dir = os.path.join(os.path.dirname(os.path.abspath(out)), "trl_step_init")
  transformers.LlamaForCausalLM(hf_config).save_pretrained(model_dir)
  model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
  prompts = [" ".join(f"t{i}" for i in row) for row in spec["prompt_ids"]]
  steps = spec["steps"]
  dataset = datasets.Dataset.from_dict({"prompt": prompts * steps})
  g, r = spec["group"], spec["response"]
  config = trl.GRPOConfig(
      output_dir=os.path.join(os.path.dirname(os.path.abspath(out)), "trl_step"),
      per_device_train_batch_size=spec["prompts"] * g, gradient_accumulation_steps=1,
      num_generations=g, max_completion_length=r, temperature=1.0, top_p=1.0, top_k=0,
      generation_kwargs=dict(min_new_tokens=r), learning_rate=spec["learning_rate"],
      lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
      beta=spec["beta"], loss_type="dapo", scale_rewards="group", num_iterations=1,
      max_steps=steps, shuffle_dataset=False, gradient_checkpointing=False,
      bf16=spec.get("compute_dtype") == "bfloat16",
      fp16=False, use_cpu=True, logging_steps=1, report_to="none", save_strategy="no",
      seed=spec["seed"], disable_tqdm=True, dataloader_num_workers=0)
  trainer = trl.GRPOTrainer(model=model, reward_funcs=even_fraction, args=config,
                            train_dataset=dataset, processing_class=tokenizer)
  times, rollouts, train_s = train_timed(trainer)
  logs = [x for x in trainer.state.log_history if "reward" in x]
  result = dict(system="TRL GRPOTrainer", step_wall_s=times.wall, step_cpu_s=times.cpu,
                rollout_s=[s for s, _ in rollouts], rollout_tokens=[n for _, n in rollouts],
                reward_mean=[x["reward"] for x in logs], train_s=train_s,
                torch_threads=torch.get_num_threads(),
                versions={"trl": trl.__version__, "torch": torch.__version__,
                          "transformers": transformers.__version__})
  side_io.write_result(out, result)

if __name__ == "__main__":
  main()
