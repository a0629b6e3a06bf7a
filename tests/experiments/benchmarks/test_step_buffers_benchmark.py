"""Smoke test of experiments/benchmarks/step_buffers.py: one GRPO step's programs of a
2-layer model with LoRA on an NF4 base, compiled in a child process that dumps XLA's
buffer assignment; and its parsers on hand-written dump text."""

import json

import pytest

from experiments.benchmarks import step_buffers

PROGRAMS = {"lora_merge", "decode_weights", "prefill", "decode", "update"}
MEMORY = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "total_bytes")


def test_smoke_run_accounts_every_program(tmp_path, capsys):
  out = tmp_path / "b.json"
  step_buffers.main(["--smoke", "--settings=lora_nf4", "--rank=4", f"--out={out}"])
  result = json.load(open(out))
  (nf4,) = result["settings"]
  assert nf4["name"] == "lora_nf4" and "--config.rl.lora.base_quant=nf4" in nf4["flags"]
  assert set(nf4["programs"]) == PROGRAMS
  for name, program in nf4["programs"].items():
    m = program["memory"]
    assert all(m[k] >= 0 for k in MEMORY) and m["argument_bytes"] > 0, name
    assert m["total_bytes"] == (m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"]
                                + m["temp_bytes"]), name
    # the dump's buffer assignment is the same program memory_analysis describes
    allocs = program["allocation_bytes"]
    assert allocs["parameter"] == m["argument_bytes"], name
    assert allocs.get("temp", 0) == m["temp_bytes"], name
    assert program["compile_rss_bytes"] >= 0, name
    assert program["peak_live"] and all(b["category"] and b["bytes"] > 0
                                        for b in program["peak_live"]), name
  host, dims, model = nf4["host"], nf4["dims"], nf4["model"]
  # [L] x {k, v} of [N, S, K, D] f32, S = prompt width + new tokens
  assert host["kv_cache_bytes"] == (2 * dims["L"] * dims["N"] * dims["S"]
                                    * model["num_kv_heads"] * model["head_dim"] * 4)
  assert 0 < host["params_bytes"] < host["sampler_params_bytes"]
  # the sampler's own copy is the merged blocks alone (the embedding is the base's); its
  # decode weights are those blocks laid out per layer plus the [E, V] head
  head_bytes = model["embed_dim"] * model["vocab_size"] * 4
  assert host["decode_weights_bytes"] >= host["sampler_params_bytes"] + head_bytes
  assert host["state_bytes"] >= host["params_bytes"] + host["frozen_bytes"] + \
      host["opt_state_bytes"]
  # the update's state is donated: its outputs alias the state's bytes
  assert nf4["programs"]["update"]["memory"]["alias_bytes"] >= host["state_bytes"]
  assert nf4["phases"]["rollout_bytes"] > host["state_bytes"] + host["kv_cache_bytes"]
  categories = {b["category"] for p in nf4["programs"].values() for b in p["peak_live"]}
  assert {"frozen base", "decode weights", "KV cache"} & categories
  assert result["cpu"]["family"] and result["cpu"]["model"]
  printed = capsys.readouterr().out
  assert "lora_nf4" in printed and "resident estimate" in printed and "CPU: " in printed


ASSIGNMENT = """BufferAssignment:
allocation 0: size 1024, parameter 0, shape |f32[16,16]| at ShapeIndex {}, maybe-live-out:
 value: <24 w.1 @0> (size=1024,offset=0): f32[16,16]{1,0}
allocation 1: size 4, constant:
 value: <21 constant.1 @0> (size=4,offset=0): f32[]
allocation 2: size 3072, preallocated-temp:
 value: <22 fusion.3 @0> (size=2048,offset=0): f32[8,64]{1,0}
 value: <25 dot.1 @0> (size=1024,offset=2048): f32[16,16]{1,0}
"""
LIVE = """HloLiveRange (max 11):
  Live ranges at 7 (peak):
    fusion.3{}: 2048 bytes (cumulative: 2048 bytes)
    w.1{}: 1024 bytes (cumulative: 3072 bytes)
  Other:
"""


def test_parsers_read_allocations_and_the_peak():
  allocs = step_buffers.parse_buffer_assignment(ASSIGNMENT)
  assert [(a["kind"], a["size"], a["parameter"]) for a in allocs] == [
      ("parameter", 1024, 0), ("constant", 4, None), ("temp", 3072, None)]
  assert [v["name"] for v in allocs[2]["values"]] == ["fusion.3", "dot.1"]
  assert allocs[2]["values"][0]["shape"] == "f32[8,64]"
  assert step_buffers.parse_live_peak(LIVE) == [dict(name="fusion.3", bytes=2048),
                                                dict(name="w.1", bytes=1024)]
  hlo = ('  %fusion.3 = f32[8,64]{1,0} fusion(f32[16,16]{1,0} %w.1), kind=kLoop, '
         'metadata={op_name="jit(f)/transpose(jvp(jit(_take)))/scatter-add"}')
  assert step_buffers.parse_instructions(hlo) == {
      "fusion.3": ("fusion", "jit(f)/transpose(jvp(jit(_take)))/scatter-add")}


def test_categories_name_arguments_and_model_buffers():
  dims = dict(L=30, E=576, V=49152, N=64, T=256, S=256, K=3, D=64)
  cat = lambda program, opcode, op_name, shape: step_buffers.categorize(
      program, opcode, op_name, shape, dims)
  assert cat("update", "parameter", "state.opt_state[1][0].mu['embed']",
             "f32[49152,576]") == "optimizer state"
  assert cat("update", "parameter", "state.frozen['blocks']['mlp']['up']",
             "f32[30,576,1536]") == "frozen base"
  assert cat("decode", "parameter", "state.caches[3]['k']", "f32[64,3,256,64]") == "KV cache"
  assert cat("update", "fusion", "jit(train_step)/transpose(jvp(jit(_take)))/scatter-add",
             "f32[49152,576]") == "embedding grad"
  assert cat("update", "fusion", "jit(train_step)/cond/branch_1_fun/add",
             "f32[49152,576]") == "optimizer update"
  assert cat("update", "fusion", "jit(train_step)/jvp()/while", "f32[576,49152]") == \
      "head matrix copy [E, V]"
  assert cat("update", "fusion", "jit(train_step)/jvp()/while/body/dynamic_update_slice",
             "f32[30,64,208,576]") == "per-layer activations (remat)"
  assert cat("update", "fusion", "jit(train_step)/jvp()/while/body/select_n",
             "f32[64,3,3,208,256]") == "attention scores (a layer)"
  assert cat("update", "fusion", "jit(train_step)/transpose(jvp())/exp",
             "f32[64,16,49152]") == "logits chunk (grad)"
  assert cat("decode", "fusion", "jit(decode_impl)/while/body/scatter",
             "f32[64,3,256,64]") == "KV cache"
  assert cat("decode", "fusion", "jit(decode_impl)/while/body/reduce_max",
             "f32[64,3,3,256]") != "KV cache"  # attention scores of one step


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--settings=full,x"], ["--rank=0"], ["--targets=q_proj,attn"], ["--top=0"]):
    with pytest.raises(SystemExit) as exit_info:
      step_buffers.main(bad + [f"--out={tmp_path / 'b.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "b.json").exists()
