"""Multi-host on CPU: 2 processes x 4 devices == 1 process x 8 devices, and config resolution.

The equivalence test starts tests/parallel/multiprocess_worker.py three times (two
processes joined through a localhost coordinator with gloo CPU collectives,
and one 8-device process), each running SFT and GRPO steps on a
data=2 x fsdp=2 x tensor=2 mesh where every process builds only its rows.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from host_faults import free_port, kill_one_host_after

from child_process import xla_flags
from rl_post.parallel import distributed
from rl_post.parallel.distributed import DistributedConfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOL = 1e-5  # f32: reduction order differs between the layouts


def _start(out, num_processes, process_id, local_devices, port=0, hf_dir=""):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  env["XLA_FLAGS"] = xla_flags()
  argv = [sys.executable, os.path.join(HERE, "multiprocess_worker.py"),
          f"--num_processes={num_processes}", f"--process_id={process_id}",
          f"--port={port}", f"--local_devices={local_devices}", f"--out={out}",
          f"--hf_dir={hf_dir}"]
  return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def _hf_checkpoint(directory):
  """A tiny HF checkpoint written by our own `hf.save` (no downloads) and its logits."""
  import jax
  from multiprocess_worker import hf_tokens
  from rl_post import models
  from rl_post.models import hf
  config = models.ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, num_heads=4,
                              num_kv_heads=2, head_dim=8, mlp_dim=64, attention_impl="xla")
  params = models.init_params(config, jax.random.key(7))
  hf.save(str(directory), config, params)
  return np.asarray(models.apply(config, params, hf_tokens(config.vocab_size)))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  root = tmp_path_factory.mktemp("multiprocess")
  hf_logits = _hf_checkpoint(root / "hf")
  port = free_port()
  procs = [_start(root / "two", 2, i, 4, port, root / "hf") for i in (0, 1)]
  procs.append(_start(root / "one", 1, 0, 8, hf_dir=root / "hf"))
  try:
    logs = [p.communicate(timeout=600)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  return (dict(np.load(root / "two" / "result.npz")), dict(np.load(root / "one" / "result.npz")),
          hf_logits)


def test_each_process_builds_only_its_rows(results):
  two, one, _ = results
  np.testing.assert_array_equal(two["rows"], [[0, 4], [4, 8]])
  np.testing.assert_array_equal(one["rows"], [[0, 8]])


@pytest.mark.parametrize("algo", ["sft", "grpo"])
def test_two_processes_match_one_process(results, algo):
  two, one, _ = results
  keys = sorted(k for k in one if k.startswith(f"{algo}/") and "/rows/" not in k)
  assert keys == sorted(k for k in two if k.startswith(f"{algo}/") and "/rows/" not in k)
  assert any("/params/" in k for k in keys) and any("/metrics/loss/" in k for k in keys)
  assert one[f"{algo}/metrics/grad_norm/0"] > 1e-3  # the steps did real updates
  assert one[f"{algo}/metrics/loss/0"] != one[f"{algo}/metrics/loss/1"]
  for k in keys:
    np.testing.assert_allclose(two[k], one[k], atol=TOL, rtol=TOL, err_msg=k)


def test_hf_import_onto_a_two_process_mesh_gives_the_same_logits(results):
  two, one, want = results
  # the embedding is split over fsdp and tensor: each process holds only its 4 shards of 8
  assert not two["hf/embed_fully_addressable"] and two["hf/embed_local_shards"] == 4
  assert one["hf/embed_fully_addressable"] and one["hf/embed_local_shards"] == 8
  assert np.abs(want).max() > 1e-2
  np.testing.assert_allclose(two["hf/logits"], want, atol=TOL, rtol=TOL)
  np.testing.assert_allclose(one["hf/logits"], want, atol=TOL, rtol=TOL)


def test_resolve_off_explicit_and_env():
  assert distributed.resolve(DistributedConfig(), {}) is None
  args = distributed.resolve(DistributedConfig(mode="explicit", coordinator_address="h:1",
                                               num_processes=4, process_id=3), {})
  assert args.kwargs() == dict(coordinator_address="h:1", num_processes=4, process_id=3)
  env = {distributed.ENV_COORDINATOR: "c:9", distributed.ENV_NUM_PROCESSES: "2",
         distributed.ENV_PROCESS_ID: "1"}
  args = distributed.resolve(DistributedConfig(mode="auto"), env)
  assert (args.source, args.coordinator_address, args.process_id) == ("env", "c:9", 1)


def test_resolve_auto_detects_slurm_and_tpu_and_stays_single_host_otherwise():
  auto = DistributedConfig(mode="auto")
  slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NTASKS": "16"}
  assert distributed.resolve(auto, slurm).source == "slurm"
  assert distributed.resolve(auto, dict(slurm, SLURM_NTASKS="1")) is None
  assert distributed.resolve(auto, {"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3",
                                    "TPU_WORKER_ID": "2"}).source == "tpu"
  assert distributed.resolve(auto, {"TPU_WORKER_HOSTNAMES": "localhost"}) is None
  assert distributed.resolve(auto, {}) is None
  assert distributed.resolve(auto, {distributed.ENV_CLUSTER: "tpu"}).source == "tpu"
  with pytest.raises(ValueError, match="must be one of"):
    distributed.resolve(auto, {distributed.ENV_CLUSTER: "k8s"})


@pytest.mark.parametrize("config,env,message", [
    (dict(mode="explicit", coordinator_address="nohost", num_processes=2, process_id=0), {},
     "host:port"),
    (dict(mode="explicit", coordinator_address="h:1", num_processes=2, process_id=2), {},
     r"process_id must be in \[0, 2\)"),
    (dict(mode="explicit", coordinator_address="h:1", num_processes=0, process_id=0), {},
     "num_processes must be >= 1"),
    (dict(mode="auto"), {distributed.ENV_COORDINATOR: "h:1"}, "set all three or none"),
    (dict(mode="auto"), {distributed.ENV_COORDINATOR: "h:1", distributed.ENV_NUM_PROCESSES: "x",
                         distributed.ENV_PROCESS_ID: "0"}, "must be an int"),
])
def test_bad_settings_name_the_field(config, env, message):
  with pytest.raises(ValueError, match=message):
    distributed.resolve(DistributedConfig(**config), env)


def test_bad_mode_is_rejected_by_the_section():
  with pytest.raises(ValueError, match="distributed.mode must be one of"):
    distributed.initialize(dict(mode="pod"))


def test_off_mode_initialises_nothing():
  assert distributed.initialize(dict(mode="off")) is None
  assert distributed.initialize(None) is None


def _sft(workdir, tok, steps, processes, port=0, process_id=0):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep +
             os.environ.get("PYTHONPATH", ""),
             XLA_FLAGS=xla_flags(8 // processes))
  flags = []
  if processes > 1:
    env.update(RL_POST_COORDINATOR_ADDRESS=f"localhost:{port}",
               RL_POST_NUM_PROCESSES=str(processes), RL_POST_PROCESS_ID=str(process_id))
    flags.append("--config.distributed.mode=auto")
  argv = [sys.executable, os.path.join(ROOT, "experiments", "train_sft.py"),
          "--config=configs/sft_arithmetic.py:tiny", f"--workdir={workdir}",
          f"--config.tokenizer.path={tok}", f"--config.sft.num_steps={steps}",
          "--config.sft.checkpoint_every=2", *flags]
  return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _losses(workdir):
  from rl_post.metrics.writers import read_metrics
  return {r["step"]: (r["loss"], r["token_accuracy"]) for r in read_metrics(workdir)}


def test_two_process_sft_resumes_after_kill_9_and_matches_one_process(tokenizer_path, tmp_path):
  steps = 6
  one = _sft(tmp_path / "one", tokenizer_path, steps, 1)
  port = free_port()
  two = [_sft(tmp_path / "two", tokenizer_path, steps, 2, port, i) for i in (0, 1)]
  first_checkpoint = tmp_path / "two" / "checkpoints" / "2"
  kill_one_host_after(first_checkpoint, two)
  assert not (tmp_path / "two" / "export").exists()  # it really stopped before the end
  port = free_port()
  again = [_sft(tmp_path / "two", tokenizer_path, steps, 2, port, i) for i in (0, 1)]
  logs = [p.communicate(timeout=600)[0] for p in again]
  assert [p.returncode for p in again] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
  assert "resumed SFT at step" in logs[0]
  assert one.communicate(timeout=600)[0] is not None and one.returncode == 0
  got, want = _losses(tmp_path / "two"), _losses(tmp_path / "one")
  assert sorted(got) == sorted(want) == list(range(1, steps + 1))
  for step in want:
    np.testing.assert_allclose(got[step], want[step], atol=TOL, rtol=TOL, err_msg=str(step))
  assert (tmp_path / "two" / "export").exists()


def test_process_block_splits_reward_rows_evenly_and_in_order():
  from rl_post.rewards.process_split import process_block
  blocks = [process_block(10, p, 3) for p in range(3)]
  assert [(b.start, b.stop) for b in blocks] == [(0, 3), (3, 6), (6, 10)]
  assert [process_block(2, p, 4) for p in range(4)] == [slice(0, 0), slice(0, 1), slice(1, 1),
                                                         slice(1, 2)]
  with pytest.raises(ValueError, match=r"not in \[0, 2\)"):
    process_block(4, 2, 2)
