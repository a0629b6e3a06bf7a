"""launch/tpu_pod.sh and launch/slurm_gpu.sbatch: dry runs print every command, real runs run them.

`gcloud`, `sbatch` and `srun` are replaced by stubs on PATH that log their
argv, so the tests see exactly what would reach the cluster.
"""

import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRY = ["experiments/train_rl.py", "--config=configs/smollm2_135m_grpo.py",
         "--workdir=/shared/run one"]
STUB = """#!/usr/bin/env bash
printf '%s' "$(basename "$0")" >> "{log}"; printf ' %q' "$@" >> "{log}"; echo >> "{log}"
[ "$(basename "$0") $1 $2 $3" = "gcloud compute tpus tpu-vm" ] && [ "$4" = describe ] && exit {describe_rc}
exit 0
"""


def _run(script, args, tmp_path, describe_rc=1, env=None):
  bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
  bin_dir.mkdir(exist_ok=True)
  for name in ("gcloud", "sbatch", "srun"):
    (bin_dir / name).write_text(STUB.format(log=log, describe_rc=describe_rc))
    (bin_dir / name).chmod(0o755)
  full_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  full_env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", TMPDIR=str(tmp_path), **(env or {}))
  out = subprocess.run(["bash", os.path.join(ROOT, script), *args], env=full_env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
  calls = log.read_text().splitlines() if log.exists() else []
  return out, calls


def _printed(stdout):
  return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def test_tpu_pod_dry_run_prints_create_copy_install_run_and_runs_nothing(tmp_path):
  out, calls = _run("launch/tpu_pod.sh", ["--name=pod", "--zone=us-east5-a",
                                          "--accelerator=v5p-64", "--project=proj", "--dry_run",
                                          "--", *ENTRY], tmp_path)
  assert out.returncode == 0, out.stderr
  assert calls == []  # nothing reached gcloud
  cmds = _printed(out.stdout)
  assert [c[:5] for c in cmds if c[0] == "gcloud"] == [
      ["gcloud", "compute", "tpus", "tpu-vm", "describe"],
      ["gcloud", "compute", "tpus", "tpu-vm", "create"],
      ["gcloud", "compute", "tpus", "tpu-vm", "scp"],
      ["gcloud", "compute", "tpus", "tpu-vm", "ssh"],
      ["gcloud", "compute", "tpus", "tpu-vm", "ssh"]]
  create = cmds[1]
  assert "--accelerator-type=v5p-64" in create and "--version=v2-alpha-tpuv5" in create
  assert "--zone=us-east5-a" in create and "--project=proj" in create
  assert any(c[0] == "tar" for c in cmds)
  install, train = cmds[-2], cmds[-1]
  assert "--worker=all" in install and "--worker=all" in train
  assert "pip install" in install[-1] and "jax[tpu]==0.10.2" in install[-1]
  remote = shlex.split(train[-1].split("--command=", 1)[1])
  assert remote[remote.index("RL_POST_CLUSTER=tpu") + 1:] == [
      ".venv/bin/python", *ENTRY, "--config.distributed.mode=auto"]


def test_tpu_pod_real_run_reuses_an_existing_slice(tmp_path):
  out, calls = _run("launch/tpu_pod.sh", ["--name=pod", "--zone=z", "--reuse", "--",
                                          *ENTRY], tmp_path, describe_rc=0)
  assert out.returncode == 0, out.stderr
  verbs = [c.split()[4] for c in calls]
  assert verbs == ["describe", "scp", "ssh", "ssh"]  # no create
  assert os.path.getsize(tmp_path / "rl_post_code_pod.tar.gz") > 1000


def test_tpu_pod_real_run_creates_a_missing_slice(tmp_path):
  out, calls = _run("launch/tpu_pod.sh", ["--name=pod", "--zone=z", "--accelerator=v5litepod-8",
                                          "--", *ENTRY], tmp_path, describe_rc=1)
  assert out.returncode == 0, out.stderr
  assert [c.split()[4] for c in calls] == ["describe", "create", "scp", "ssh", "ssh"]
  assert "--version=v2-alpha-tpuv5-lite" in calls[1]


@pytest.mark.parametrize("args,message", [
    (["--zone=z", "--", *ENTRY], "--name is required"),
    (["--name=p", "--", *ENTRY], "--zone is required"),
    (["--name=p", "--zone=z"], "give the entry point"),
    (["--name=p", "--zone=z", "--", "experiments/nope.py"], "does not exist"),
    (["--name=p", "--zone=z", "--bogus", "--", *ENTRY], "unknown flag --bogus"),
    (["--name=p", "--zone=z", "--dry_run", "--", *ENTRY], "--accelerator is required"),
])
def test_tpu_pod_bad_flags(tmp_path, args, message):
  out, calls = _run("launch/tpu_pod.sh", args, tmp_path)
  assert out.returncode == 2 and message in out.stderr
  assert not any("create" in c for c in calls)


def test_slurm_dry_run_prints_sbatch_install_and_srun(tmp_path):
  out, calls = _run("launch/slurm_gpu.sbatch", ["--nodes=4", "--gpus_per_node=8",
                                                "--partition=gpu", "--install", "--dry_run",
                                                *ENTRY], tmp_path)
  assert out.returncode == 0, out.stderr
  assert calls == []
  cmds = _printed(out.stdout)
  assert cmds[0] == ["sbatch", "--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8",
                     "--partition=gpu", "launch/slurm_gpu.sbatch", "--install", *ENTRY]
  assert cmds[2][:3] == [".venv/bin/pip", "install", "-q"] and "jax[cuda12]==0.10.2" in cmds[2]
  assert cmds[3] == ["srun", "--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8",
                     "--kill-on-bad-exit=1", ".venv/bin/python", *ENTRY,
                     "--config.distributed.mode=auto"]


def test_slurm_inside_the_allocation_runs_srun(tmp_path):
  env = dict(SLURM_JOB_ID="42", SLURM_SUBMIT_DIR=ROOT, SLURM_JOB_NUM_NODES="2",
             SLURM_GPUS_ON_NODE="4", PYTHON="/opt/py")
  out, calls = _run("launch/slurm_gpu.sbatch", ENTRY, tmp_path, env=env)
  assert out.returncode == 0, out.stderr
  assert [shlex.split(c) for c in calls] == [
      ["srun", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--kill-on-bad-exit=1",
       "/opt/py", *ENTRY, "--config.distributed.mode=auto"]]


def test_slurm_from_a_login_node_submits_with_sbatch(tmp_path):
  out, calls = _run("launch/slurm_gpu.sbatch", ["--nodes=2", *ENTRY], tmp_path)
  assert out.returncode == 0, out.stderr
  assert [c.split()[0] for c in calls] == ["sbatch"]


@pytest.mark.parametrize("args,message", [
    (["--nodes=0", *ENTRY], "--nodes must be a positive int"),
    (["--gpus_per_node=x", *ENTRY], "--gpus_per_node must be a positive int"),
    (["--dry_run"], "give the entry point"),
    (["--frobnicate", *ENTRY], "unknown flag --frobnicate"),
    (["experiments/nope.py"], "does not exist"),
])
def test_slurm_bad_flags(tmp_path, args, message):
  out, calls = _run("launch/slurm_gpu.sbatch", args, tmp_path)
  assert out.returncode == 2 and message in out.stderr and calls == []


@pytest.mark.parametrize("devices", ["abc", "0", ""])
def test_local_sh_checks_devices(tmp_path, devices):
  out = subprocess.run(["bash", os.path.join(ROOT, "launch", "local.sh"), f"--devices={devices}",
                        "-c", "print('ran')"], capture_output=True, text=True, timeout=60)
  assert out.returncode == 2 and out.stdout == ""
  assert out.stderr == f"error: --devices='{devices}': must be an int >= 1 (fake CPU devices)\n"
