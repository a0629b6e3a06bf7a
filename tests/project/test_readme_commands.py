"""Every command in README.md's ```bash blocks runs (at :tiny size).

COMMANDS maps each README command, as written, to the invocation the test
runs: the same entry point and flags with a `:tiny` config and paths under
one temporary folder. A README command missing from the table fails
`test_every_readme_command_is_in_the_table`; an entry that is not run says
why. Entries run in a chain (tokenizer -> SFT -> RL -> evaluate) that shares
one folder; an entry runs the ones it reads from first. Step counts are
cut further where only "it runs" is being checked.
"""

import dataclasses
import os
import re
import shlex
import subprocess
import sys

import pytest

from child_process import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = "{work}/tokenizer/arithmetic.model"


@dataclasses.dataclass(frozen=True)
class Entry:
  argv: tuple[str, ...] = ()     # "{py}" is this interpreter, "{work}" the shared folder
  outputs: tuple[str, ...] = ()  # files the command must write
  after: tuple[str, ...] = ()    # README commands whose outputs it reads
  not_run: str = ""              # why the test does not run it


_BUILD_TOKENIZER = "python experiments/build_tokenizer.py --config=configs/tokenizer.py"
_TRAIN_SFT = ("python experiments/train_sft.py --config=configs/sft_arithmetic.py "
              "--workdir=/tmp/rl_post/sft")
_TRAIN_RL = ("python experiments/train_rl.py --config=configs/grpo_arithmetic.py "
             "--workdir=/tmp/rl_post/grpo --config.rl.init_from=/tmp/rl_post/sft/export "
             "--config.rl.num_generations=16")
_EVALUATE = ("python experiments/evaluate.py --config=configs/grpo_arithmetic.py "
             "--checkpoint=/tmp/rl_post/sft/export --workdir=/tmp/rl_post/eval_sft")
_EVALUATE_RL = ("python experiments/evaluate.py --config=configs/grpo_arithmetic.py "
                "--checkpoint=/tmp/rl_post/grpo --workdir=/tmp/rl_post/eval_grpo")
_MESH = ("launch/local.sh --devices=8 experiments/train_rl.py "
         "--config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/grpo_mesh "
         "--config.mesh.data=2 --config.mesh.fsdp=2 --config.mesh.tensor=2")
_RING = ("launch/local.sh --devices=8 experiments/train_rl.py "
         "--config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/grpo_cp "
         "--config.mesh.data=2 --config.mesh.context=4")
_CHAOS = ("launch/local.sh --restart_on_failure=2 experiments/train_rl.py "
          "--config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/grpo_chaos "
          "--config.faults.corrupt_checkpoint_at_steps=(2,) --config.faults.kill_at_steps=(3,)")
_MULTI_TOKENIZER = "python experiments/build_tokenizer.py --config=configs/grpo_multidomain.py"
_MULTI_SFT = ("python experiments/train_sft.py --config=configs/sft_multidomain.py "
              "--workdir=/tmp/rl_post/multi_sft")
_MULTI_RL = ("python experiments/train_rl.py --config=configs/grpo_multidomain.py "
             "--workdir=/tmp/rl_post/multi_grpo "
             "--config.rl.init_from=/tmp/rl_post/multi_sft/export")
_MULTI_EVALUATE = ("python experiments/evaluate.py --config=configs/grpo_multidomain.py "
                   "--checkpoint=/tmp/rl_post/multi_grpo --workdir=/tmp/rl_post/multi_eval_grpo "
                   "--num_samples=2 --ks=1,2")
MULTI_TOK = "{work}/tokenizer/multidomain.model"
_AOT = "python experiments/aot_check.py --config=configs/grpo_arithmetic.py --target=v5e-8"
_TPU_POD = ("launch/tpu_pod.sh --name=rl-pod --zone=us-east5-a --accelerator=v5p-64 --dry_run "
            "-- experiments/train_rl.py --config=configs/grpo_arithmetic.py "
            "--workdir=gs://my-bucket/grpo")
_SLURM = ("launch/slurm_gpu.sbatch --nodes=2 --gpus_per_node=8 --dry_run "
          "experiments/train_rl.py --config=configs/grpo_arithmetic.py --workdir=/shared/grpo")

_SCAN = ("python experiments/scan_domains.py --config=configs/smollm2_135m_grpo.py "
         "--domains=all --levels=easiest --problems=4 --samples=8 --ks=1,8 "
         "--workdir=/tmp/rl_post/scan")
_SCRATCH_DEMO = ("python experiments/demo.py --config=configs/demo.py "
                 "--workdir=/tmp/rl_post/scratch_demo")
_EPISODES = ("python experiments/train_rl.py --config=configs/grpo_episodes.py:tiny "
             "--workdir=/tmp/rl_post/episodes_tiny")
_DEMO_SEEDS = "python experiments/demo_seeds.py --seeds=0,1,2 --workdir=/tmp/rl_post_seeds"
_PLOT_SEEDS = ("python experiments/plot_seeds.py "
               "--seeds_json=experiments/results/demo_short_first/seeds.json "
               "--metrics_dir=experiments/results/demo_short_first/seed_{seed}_rl")

COMMANDS = {
    "bash launch/demo.sh": Entry(  # the real SmolLM2 at toy sizes
        argv=("{py}", "experiments/demo.py", "--config=configs/smollm2_135m_grpo.py:tiny",
              "--workdir={work}/demo"),
        outputs=("demo/report/summary.md", "demo/report/summary.json",
                 "demo/control/samples.jsonl", "demo/rl/export/model_config.json")),
    _DEMO_SEEDS: Entry(
        # the from-scratch tiny config: the same seed runner and outputs at a third of the
        # suite time of the SmolLM2 one, which the demo.sh entry runs end to end
        argv=("{py}", "experiments/demo_seeds.py", "--config=configs/demo.py:tiny", "--seeds=0",
              "--workdir={work}/seeds", "--config.rl.num_steps=2"),
        outputs=("seeds/seeds.json", "seeds/seeds.md", "seeds/seed_0/report/pass_rate.png",
                 "seeds/seeds_arms.png", "seeds/seeds_curves.png")),
    _PLOT_SEEDS: Entry(  # the recorded run's files, drawn into the test's folder
        argv=("{py}", "experiments/plot_seeds.py",
              "--seeds_json=experiments/results/demo_short_first/seeds.json",
              "--metrics_dir=experiments/results/demo_short_first/seed_{{seed}}_rl",
              "--out_dir={work}/plots"),
        outputs=("plots/seeds_arms.png", "plots/seeds_curves.png")),
    "bash launch/test.sh": Entry(
        not_run="runs this test suite (CI runs it) and pip-installs into ./.venv"),
    _BUILD_TOKENIZER: Entry(
        argv=("{py}", "experiments/build_tokenizer.py", "--config=configs/tokenizer.py:tiny",
              f"--config.tokenizer.path={TOK}"),
        outputs=("tokenizer/arithmetic.model",)),
    _TRAIN_SFT: Entry(
        argv=("{py}", "experiments/train_sft.py", "--config=configs/sft_arithmetic.py:tiny",
              "--workdir={work}/sft", f"--config.tokenizer.path={TOK}", "--config.sft.num_steps=5"),
        outputs=("sft/export/model_config.json", "sft/metrics.jsonl"),
        after=(_BUILD_TOKENIZER,)),
    _TRAIN_RL: Entry(
        argv=("{py}", "experiments/train_rl.py", "--config=configs/grpo_arithmetic.py:tiny",
              "--workdir={work}/grpo", "--config.rl.init_from={work}/sft/export",
              "--config.rl.num_generations=16", f"--config.tokenizer.path={TOK}",
              "--config.rl.num_steps=2"),
        outputs=("grpo/metrics.jsonl", "grpo/config.json"),
        after=(_TRAIN_SFT,)),
    _EVALUATE: Entry(
        argv=("{py}", "experiments/evaluate.py", "--config=configs/grpo_arithmetic.py:tiny",
              "--checkpoint={work}/sft/export", "--workdir={work}/eval_sft",
              f"--config.tokenizer.path={TOK}"),
        outputs=("eval_sft/eval.json", "eval_sft/eval.md"),
        after=(_TRAIN_SFT,)),
    _EVALUATE_RL: Entry(
        argv=("{py}", "experiments/evaluate.py", "--config=configs/grpo_arithmetic.py:tiny",
              "--checkpoint={work}/grpo", "--workdir={work}/eval_grpo",
              f"--config.tokenizer.path={TOK}"),
        outputs=("eval_grpo/eval.json", "eval_grpo/eval.md"),
        after=(_TRAIN_RL,)),
    _MESH: Entry(
        argv=("launch/local.sh", "--devices=8", "experiments/train_rl.py",
              "--config=configs/grpo_arithmetic.py:tiny", "--workdir={work}/grpo_mesh",
              "--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.mesh.tensor=2",
              f"--config.tokenizer.path={TOK}", "--config.rl.num_steps=2"),
        outputs=("grpo_mesh/metrics.jsonl",),
        after=(_BUILD_TOKENIZER,)),
    _RING: Entry(
        argv=("launch/local.sh", "--devices=8", "experiments/train_rl.py",
              "--config=configs/grpo_arithmetic.py:tiny", "--workdir={work}/grpo_cp",
              "--config.mesh.data=2", "--config.mesh.context=4",
              f"--config.tokenizer.path={TOK}", "--config.rl.num_steps=2"),
        outputs=("grpo_cp/metrics.jsonl",),
        after=(_BUILD_TOKENIZER,)),
    _CHAOS: Entry(
        argv=("launch/local.sh", "--restart_on_failure=2", "experiments/train_rl.py",
              "--config=configs/grpo_arithmetic.py:tiny", "--workdir={work}/grpo_chaos",
              "--config.faults.corrupt_checkpoint_at_steps=(2,)",
              "--config.faults.kill_at_steps=(3,)", f"--config.tokenizer.path={TOK}"),
        outputs=("grpo_chaos/restarts.jsonl", "grpo_chaos/faults.jsonl",
                 "grpo_chaos/metrics.jsonl"),
        after=(_BUILD_TOKENIZER,)),
    # The multi-domain chain (tests/rl/test_multidomain_run.py checks its metrics).
    _MULTI_TOKENIZER: Entry(
        argv=("{py}", "experiments/build_tokenizer.py",
              "--config=configs/grpo_multidomain.py:tiny", f"--config.tokenizer.path={MULTI_TOK}"),
        outputs=("tokenizer/multidomain.model",)),
    _MULTI_SFT: Entry(
        argv=("{py}", "experiments/train_sft.py", "--config=configs/sft_multidomain.py:tiny",
              "--workdir={work}/multi_sft", f"--config.tokenizer.path={MULTI_TOK}",
              "--config.sft.num_steps=2"),
        outputs=("multi_sft/export/model_config.json", "multi_sft/metrics.jsonl"),
        after=(_MULTI_TOKENIZER,)),
    _MULTI_RL: Entry(
        argv=("{py}", "experiments/train_rl.py", "--config=configs/grpo_multidomain.py:tiny",
              "--workdir={work}/multi_grpo", "--config.rl.init_from={work}/multi_sft/export",
              f"--config.tokenizer.path={MULTI_TOK}", "--config.rl.num_steps=1"),
        outputs=("multi_grpo/metrics.jsonl", "multi_grpo/config.json"),
        after=(_MULTI_SFT,)),
    _MULTI_EVALUATE: Entry(  # :tiny trains on no held-out set; give it 7 (levels 1-2)
        argv=("{py}", "experiments/evaluate.py", "--config=configs/grpo_multidomain.py:tiny",
              "--checkpoint={work}/multi_grpo", "--workdir={work}/multi_eval_grpo",
              f"--config.tokenizer.path={MULTI_TOK}", "--config.tasks.heldout_size=7",
              "--config.rl.max_prompt_len=320", "--config.rl.prompt_buckets=(320,)",
              "--num_samples=2", "--ks=1,2"),
        outputs=("multi_eval_grpo/eval.json", "multi_eval_grpo/eval.md"),
        after=(_MULTI_RL,)),
    _AOT: Entry(
        argv=("{py}", "experiments/aot_check.py", "--config=configs/grpo_arithmetic.py",
              "--target=v5e-8", "--json_out={work}/aot.json"),
        outputs=("aot.json",)),
    _EPISODES: Entry(
        argv=("{py}", "experiments/train_rl.py", "--config=configs/grpo_episodes.py:tiny",
              "--workdir={work}/episodes", "--config.rl.num_steps=2"),
        outputs=("episodes/metrics.jsonl", "episodes/config.json")),
    _SCAN: Entry(  # the real SmolLM2 on two domains' easiest level, 2 problems, 4 tokens
        argv=("{py}", "experiments/scan_domains.py", "--config=configs/smollm2_135m_grpo.py:tiny",
              "--domains=arithmetic,rg/products", "--levels=easiest", "--problems=2",
              "--samples=2", "--ks=1,2", "--max_new_tokens=4", "--workdir={work}/scan"),
        outputs=("scan/scan.json", "scan/scan.md")),
    _SCRATCH_DEMO: Entry(
        argv=("{py}", "experiments/demo.py", "--config=configs/demo.py:tiny",
              "--workdir={work}/scratch_demo"),
        outputs=("scratch_demo/report/summary.md", "scratch_demo/report/summary.json")),
    _TPU_POD: Entry(argv=tuple(_TPU_POD.split())),  # --dry_run: prints, runs nothing
    _SLURM: Entry(argv=tuple(_SLURM.split())),
}


def readme_commands(text: str) -> list[str]:
  """The commands of every ```bash block: continuations joined, comments dropped."""
  commands = []
  for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
    joined = re.sub(r"\\\n", " ", block)
    for line in joined.splitlines():
      words = shlex.split(line, comments=True)
      if words:
        commands.append(" ".join(words))
  return commands


def test_readme_commands_parse():
  text = "x\n```bash\nbash a.sh   # note\n# only a comment\npython b.py --x=1 \\\n    --y=2\n```\n"
  assert readme_commands(text) == ["bash a.sh", "python b.py --x=1 --y=2"]


def test_every_readme_command_is_in_the_table():
  with open(os.path.join(ROOT, "README.md")) as f:
    commands = readme_commands(f.read())
  assert commands, "README.md has no ```bash blocks"
  missing = [c for c in commands if c not in COMMANDS]
  assert not missing, ("README commands without an entry in tests/project/test_readme_commands.py "
                       f"COMMANDS (add a tiny invocation that runs it): {missing}")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
  work = tmp_path_factory.mktemp("readme")
  done = {}

  def run(command: str) -> subprocess.CompletedProcess:
    if command not in done:
      entry = COMMANDS[command]
      for before in entry.after:
        assert run(before).returncode == 0, f"{before!r} failed"
      argv = [a.format(py=sys.executable, work=work) for a in entry.argv]
      env = dict(os.environ, PYTHONPATH=ROOT, PYTHON=sys.executable, JAX_PLATFORMS="cpu")
      env["XLA_FLAGS"] = xla_flags()
      done[command] = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                                     timeout=900)
    return done[command]

  run.work = work
  return run


def _label(command: str) -> str:
  return "+".join(os.path.basename(w) for w in command.split() if w.endswith((".py", ".sh")))


_RUN = [c for c, e in COMMANDS.items() if not e.not_run]


@pytest.mark.parametrize("command", _RUN, ids=[f"{i}-{_label(c)}" for i, c in enumerate(_RUN)])
def test_readme_command_runs(runner, command):
  proc = runner(command)
  assert proc.returncode == 0, f"{command!r} failed:\n{proc.stderr[-3000:]}"
  for output in COMMANDS[command].outputs:
    assert os.path.isfile(os.path.join(runner.work, output)), f"{command!r} wrote no {output}"
