"""The sampler on a mesh of its own (rl.sampler_devices): the device split and its
errors, the one-mesh default untouched, and on 8 fake devices a 4 + 4 split that runs,
equals the one-mesh run on 4 devices and resumes exactly (tests/rl/sampler_mesh_check.py)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from child_process import json_reports
from configs import grpo_episodes
from digit_runs import digit_config
from rl_post.errors import ConfigError
from rl_post.parallel.distributed import DistributedConfig
from rl_post.rl import components, overlap_update, sampler_mesh, trainer
from rl_post.rl import config as rl_config
from run_metrics import computed_rows

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICES = [f"d{i}" for i in range(8)]  # split_devices only slices and counts them
DATA = dict(data=-1, fsdp=1, tensor=1, context=1)


def test_the_sampler_takes_the_last_devices():
  assert sampler_mesh.split_devices(4, DEVICES, DATA) == (DEVICES[:4], DEVICES[4:])
  assert sampler_mesh.split_devices(2, DEVICES, dict(DATA, tensor=2)) == (DEVICES[:6],
                                                                          DEVICES[6:])


@pytest.mark.parametrize("devices,n,mesh,message", [
    (8, 8, DATA, r"must leave the trainer devices: 0 < n < 8"),
    (8, 9, DATA, r"must leave the trainer devices"),
    (8, 4, dict(DATA, data=8), r"leaves the trainer mesh 4 devices, which the mesh section "
                               r".* cannot lay out \(has 8 devices but 4 are available\)"),
    (9, 1, dict(DATA, tensor=2), r"leaves the sampler mesh 1 devices, which the mesh section "
                                 r".* cannot lay out \(its axes do not divide the 1 devices\)"),
    (8, 4, dict(DATA, context=2), r"does not combine with context parallelism \(mesh.context "
                                  r"= 2\)"),
])
def test_bad_splits_name_the_field(devices, n, mesh, message):
  with pytest.raises(ConfigError, match=message) as info:
    sampler_mesh.split_devices(n, [f"d{i}" for i in range(devices)], mesh)
  assert info.value.field == "rl.sampler_devices"


def test_the_split_is_single_process():
  with pytest.raises(ConfigError, match=r"rl.sampler_devices=4: splits one process's devices; "
                     r"this run has 2 processes"):
    sampler_mesh.split_devices(4, DEVICES, DATA, process_count=2)
  explicit = DistributedConfig(mode="explicit", coordinator_address="localhost:1234",
                               num_processes=2, process_id=0)
  with pytest.raises(ConfigError, match=r"a multi-host run \(distributed.mode != 'off'\)"):
    sampler_mesh.check_single_process(4, explicit)
  sampler_mesh.check_single_process(0, explicit)  # no split: nothing to refuse
  sampler_mesh.check_single_process(4, DistributedConfig())


@pytest.mark.parametrize("value", [-1, 1.5, True, "4"])
def test_sampler_devices_must_be_a_count(value):
  with pytest.raises(ValueError, match=r"rl.sampler_devices must be an int >= 0"):
    rl_config.load(dict(sampler_devices=value))


def test_one_mesh_moves_nothing():
  one = sampler_mesh.SamplerMesh()
  params = {"w": jnp.ones(3)}
  assert not one.split and one.place(params) is params and one.back(params) is params
  key = jax.random.key(0)
  assert one.key(key) is key and one.metrics() == {}
  with one.running():
    pass
  state = {"w": params["w"]}  # on one mesh the hand-over is the overlap's copy
  copy = one.hand_over(params, state)
  assert copy["w"] is not params["w"]
  np.testing.assert_array_equal(copy["w"], params["w"])


def test_a_split_on_one_device_and_episodes_are_refused(tokenizer_path, tmp_path):
  config = digit_config(tokenizer_path, sampler_devices=1)
  with pytest.raises(ConfigError, match=r"rl.sampler_devices=1: must leave the trainer "
                     r"devices: 0 < n < 1"):
    trainer.train(config, str(tmp_path / "one"))
  episodes = grpo_episodes.get_config("tiny")
  episodes.rl.sampler_devices = 2
  with pytest.raises(ConfigError, match=r"rl.sampler_devices=2: needs a rollout source that "
                     r"generates on the sampler mesh \(single_turn\); EpisodeSource does not"):
    components.RLComponents(episodes, str(tmp_path / "episodes"))


# ---- 8 fake devices: 4 trainer + 4 sampler, against one mesh of 4 ----

def _stable(rows):
  # the hand-over metrics exist only with the split; the rest must match
  return computed_rows(rows, ("overlap/handover",))


@pytest.fixture(scope="module")
def reports(tokenizer_path, tmp_path_factory):
  """The split runs on 8 devices and the one-mesh runs on 4, side by side."""
  script = os.path.join(HERE, "sampler_mesh_check.py")
  return json_reports([
      (script, (tokenizer_path, str(tmp_path_factory.mktemp("split")), "split"), 8),
      (script, (tokenizer_path, str(tmp_path_factory.mktemp("one_mesh")), "one_mesh"), 4)],
      timeout=3600)


@pytest.fixture(scope="module")
def split(reports):
  return reports[0]


@pytest.fixture(scope="module")
def one_mesh(reports):
  return reports[1]


@pytest.mark.parametrize("run", ["sync", "overlap"])
def test_the_split_equals_one_mesh_of_as_many_devices(split, one_mesh, run):
  """Trainer and sampler each run data=4 on 4 devices, as the one mesh does: the
  same programs on other devices, so the same numbers, bit for bit."""
  assert (split["devices"], one_mesh["devices"]) == (8, 4)
  np.testing.assert_equal(_stable(split[run]["rows"]), _stable(one_mesh[run]["rows"]))
  np.testing.assert_equal(split[run]["params"], one_mesh[run]["params"])


def test_the_split_hands_the_params_over_at_each_rollout(split):
  sync, overlap = split["sync"]["rows"], split["overlap"]["rows"]
  gib = sync[0]["overlap/handover_gib"]  # one set of f32 policy params
  n_params = sum(len(v) for v in split["sync"]["params"].values())
  assert gib == pytest.approx(4 * n_params / overlap_update.GIB)
  assert [m["overlap/handover_gib"] for m in sync] == [gib] * 4  # before each rollout
  # checkpoint_every=2: steps 1 and 3 hand over for their own rollout (after a save it
  # waits for the update) and, before their update, for the next one, which overlaps
  # it; steps 2 and 4 generate with that copy, already on the sampler
  assert [m["overlap/handover_gib"] for m in overlap] == [2 * gib, 0, 2 * gib, 0]
  assert [m["overlap/sampler_params_gib"] > 0 for m in overlap] == [True, False, True, False]
  assert [m["async/staleness"] for m in overlap] == [0, 1, 0, 1]
  assert all((m["overlap/handover_s"] > 0) == (m["overlap/handover_gib"] > 0)
             for m in sync + overlap)


def test_the_split_overlap_resumes_exactly(split):
  straight, resumed = split["overlap"], split["resumed"]
  assert [m["step"] for m in resumed["rows"]] == [1, 2, 3, 4]
  assert _stable(resumed["rows"]) == _stable(straight["rows"])  # exactly
  assert resumed["params"] == straight["params"]


def test_lora_a_bf16_sampler_and_async_rewards_run_on_the_split(split, one_mesh):
  rows, ref = split["variants"]["rows"], one_mesh["variants"]["rows"]
  assert max(m["async/staleness"] for m in rows) == 2  # async (1) + the overlap (1)
  assert rows[0]["overlap/handover_gib"] > 0 and all(np.isfinite(m["loss"]) for m in rows)
  np.testing.assert_equal(_stable(rows), _stable(ref))
  np.testing.assert_equal(split["variants"]["params"], one_mesh["variants"]["params"])


@pytest.mark.parametrize("case,message", [
    ("all_devices", "rl.sampler_devices=8: must leave the trainer devices: 0 < n < 8"),
    ("fixed_mesh", "rl.sampler_devices=4: leaves the trainer mesh 4 devices, which the mesh "
                   "section"),
    ("model_split", "rl.sampler_devices=6: gives a sampler mesh"),
    ("batch_split", "do not divide a round's 16 rollouts"),
])
def test_bad_splits_on_eight_devices(split, case, message):
  error = split["errors"][case]
  assert error["field"] == "rl.sampler_devices" and message in error["message"], error
  if case == "model_split":
    assert "the model does not divide over" in error["message"]
