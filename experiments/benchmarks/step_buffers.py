r"""Where a SmolLM2-135M GRPO step's memory goes: every program of the step compiled
ahead of time (nothing runs), with XLA's memory analysis and its largest buffers.

  PYTHONPATH=. python -m experiments.benchmarks.step_buffers      # full, lora, lora_nf4
  PYTHONPATH=. python -m experiments.benchmarks.step_buffers --settings=lora --top=20
  PYTHONPATH=. python -m experiments.benchmarks.step_buffers --smoke --out=/tmp/b.json

Settings are lora_step.py's ("full", "lora", "lora_int8", "lora_nf4", built by
its `lora_flags`) over configs/smollm2_135m_grpo.py with 128 new tokens and the
update in one batch. Each setting runs in a child process with
`XLA_FLAGS=--xla_dump_to=<tmp> --xla_dump_hlo_as_text`, which builds the run's
own `RLComponents` (model shapes from the GGUF header; no weights are loaded)
and lowers and compiles, on abstract inputs, the programs of one step:

  lora_merge      frozen base + adapters -> merged blocks (LoRA only; the sampler's
                  params take the base's embedding and final norm as they are)
  decode_weights  params -> per-layer weights and the [E, V] head, once per rollout
  prefill         prompts -> DecodeState (KV cache [L] x [N, S, K, D])
  decode          the sampling while-loop over the (donated) DecodeState
  ref_logprobs    reference log-probs (only with rl.kl_coef > 0 or recomputed logp)
  update          the donated train step on a [n, T] minibatch

Per program: `compiled.memory_analysis()` (argument, output, alias, temp and
generated-code bytes; total = argument + output - alias + temp), the dump's
buffer assignment summed by allocation kind (parameter, temp, constant,
output), the buffers live at the peak of XLA's live-range analysis and the
largest temps, each named by its HLO instruction, the JAX op that made it
(`op_name`) and a category, and how far the compile itself raised the
child's RSS (the compiler's working memory, which the trainer pays on the
first step of each shape; the kernel's high-water mark is reset before each
compile). Host-side bytes come from shapes: trainable params, frozen base,
optimizer state, the sampler's merged blocks and decode weights, KV cache,
the update's batch. Two sums estimate each phase's resident bytes: the
rollout (the state, the sampler's copies and the decode program) and the
update (the state, its batch and the program's temps). Allocator overhead,
fragmentation and the XLA client's own buffers are not in them: compare with
lora_step.json's peak RSS. `--grad_accum=4` compiles the recipe's own
micro-batches; `--jobs` compiles settings in parallel child processes (the
bytes do not change). `--smoke` compiles a 2-layer model over the config's
`tiny` variant.
Prints a table and writes experiments/benchmarks/results/step_buffers.json with
the CPU.
"""

import argparse
import ast
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from experiments.benchmarks import child_runs, lora_step, smollm2_step

SETTINGS = lora_step.SETTINGS
DEFAULT_SETTINGS = ("full", "lora", "lora_nf4")
# a 2-layer model over SmolLM2's vocabulary (the GGUF's tokenizer); head_dim 64 so the
# 4-bit base's blocks of 64 divide every projection's input
SMOKE_MODEL = dict(num_layers=2, embed_dim=64, num_heads=2, num_kv_heads=1, head_dim=64,
                   mlp_dim=128)
MEMORY_FIELDS = dict(argument_bytes="argument_size_in_bytes", output_bytes="output_size_in_bytes",
                     alias_bytes="alias_size_in_bytes", temp_bytes="temp_size_in_bytes",
                     generated_code_bytes="generated_code_size_in_bytes")


def apply_flags(config, flags: list[str]):
  """Sets `--config.a.b=v` overrides (what train_rl.py's flags would) on `config`."""
  for flag in flags:
    key, value = flag.removeprefix("--config.").split("=", 1)
    try:
      value = ast.literal_eval(value)
    except (ValueError, SyntaxError):  # a bare string such as int8
      pass
    *path, leaf = key.split(".")
    node = config
    for name in path:
      node = node[name]
    node[leaf] = value
  return config


def run_config(spec: dict):
  """The setting's config: the recipe, lora_step's overrides, the smoke model."""
  from configs import smollm2_135m_grpo  # noqa: PLC0415
  config = smollm2_135m_grpo.get_config("tiny" if spec["smoke"] else "")
  flags = [] if spec["smoke"] else [f"--config.rl.max_new_tokens={spec['new_tokens']}",
                                    f"--config.rl.grad_accum={spec['grad_accum']}"]
  flags += lora_step.lora_flags(spec["setting"], spec["rank"], spec["alpha"],
                                tuple(spec["targets"]), spec["block_size"])
  if spec["smoke"]:
    config.model.update(SMOKE_MODEL)  # over the GGUF header's vocabulary
  return apply_flags(config, flags), flags


# ---- the dump: buffer assignment, live ranges, op metadata -------------------------------

_ALLOC = re.compile(r"^allocation (\d+): size (\d+), (.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (.*)$")
_LIVE = re.compile(r"^\s+(\S+?)(\{[\d,]*\})?: (\d+) bytes")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = .*?\b([a-z][\w\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def allocation_kind(attrs: str) -> str:
  """parameter / temp / constant / output / thread-local, from an allocation's attributes."""
  if attrs.startswith("parameter"):
    return "parameter"
  if "preallocated-temp" in attrs:
    return "temp"
  if "constant" in attrs:
    return "constant"
  if "thread-local" in attrs:
    return "thread-local"
  if "maybe-live-out" in attrs or "output" in attrs:
    return "output"
  return "temp"


def parse_buffer_assignment(text: str) -> list[dict]:
  """The allocations of a `*buffer-assignment.txt`: index, size, kind, parameter number
  and the values (instruction name, size, offset, shape) placed in each."""
  allocations = []
  for line in text.splitlines():
    m = _ALLOC.match(line)
    if m:
      attrs = m.group(3)
      param = re.match(r"parameter (\d+)", attrs)
      allocations.append(dict(index=int(m.group(1)), size=int(m.group(2)),
                              kind=allocation_kind(attrs),
                              parameter=int(param.group(1)) if param else None, values=[]))
      continue
    m = _VALUE.match(line)
    if m and allocations:
      allocations[-1]["values"].append(dict(name=m.group(1), size=int(m.group(2)),
                                            offset=int(m.group(3)),
                                            shape=m.group(4).split("{")[0]))
  return allocations


def parse_live_peak(text: str) -> list[dict]:
  """Buffers live at the peak of a `*live-range.txt` (entry computation): name, bytes."""
  out, inside = [], False
  for line in text.splitlines():
    if line.strip().startswith("Live ranges at") and "(peak)" in line:
      inside = True
      continue
    if inside:
      m = _LIVE.match(line)
      if not m:
        break
      out.append(dict(name=m.group(1), bytes=int(m.group(3))))
  return out


def parse_instructions(text: str) -> dict:
  """{instruction name: (opcode, op_name)} from optimized HLO text."""
  out = {}
  for line in text.splitlines():
    m = _INSTR.match(line)
    if m:
      op = _OP_NAME.search(line)
      out[m.group(1)] = (m.group(2), op.group(1) if op else "")
  return out


ARGUMENTS = (("state.opt_state", "optimizer state"), ("state.frozen", "frozen base"),
             ("state.params", "trainable params"), ("state.caches", "KV cache"),
             ("weights", "decode weights"), ("params", "sampler params"), ("batch", "batch"),
             ("frozen", "frozen base"), ("adapters", "trainable params"))


def categorize(program: str, opcode: str, op_name: str, shape: str, dims: dict) -> str:
  """A short name for a buffer of `program` from its opcode, JAX op name and shape
  (`dims`: the model's and step's sizes L, E, V, N rows, S cache length, K kv heads,
  D head dim);
  an argument by its path (what JAX names the parameter)."""
  if opcode == "parameter":
    return next((c for prefix, c in ARGUMENTS if op_name.startswith(prefix)), "argument")
  sizes = [int(d) for d in re.findall(r"\d+", shape.split("[", 1)[1])] if "[" in shape else []
  has = lambda *ds: all(d in sizes for d in ds)
  if has(dims["V"], dims["E"]) and len(sizes) == 2:
    if "scatter-add" in op_name:
      return "embedding grad"
    if "cond/branch" in op_name:
      return "optimizer update"
    if "transpose(" in op_name:
      return "head grad [E, V]"
    return "head matrix copy [E, V]" if sizes[0] == dims["E"] else "embedding copy"
  if dims["V"] in sizes:
    return "logits chunk (grad)" if "transpose(" in op_name else "logits chunk"
  if program == "update":
    if sizes[:1] == [dims["L"]] and len(sizes) >= 4 and sizes[-1] == dims["E"]:
      return "per-layer activations (remat)"
    if len(sizes) >= 4 and dims["S"] in sizes:
      return "attention scores (a layer)"
    if "cond/branch" in op_name:
      return "optimizer update"
    if sizes[:1] == [dims["L"]]:
      return "[L]-stacked weight grad" if "transpose(" in op_name else "[L]-stacked weights"
    return "backward temp" if "transpose(" in op_name else "forward temp"
  if program in ("prefill", "decode") and sorted(sizes) == sorted(
      [dims["N"], dims["S"], dims["K"], dims["D"]]):  # one layer's K or V, any layout
    return "KV cache"
  if program == "lora_merge":
    return "merged blocks"
  if program == "decode_weights":
    return "per-layer weights"
  return "other"


def program_buffers(dump_dir: str, module: str, top: int) -> dict:
  """Allocation sums and the largest buffers live at the peak, from the newest dump of
  `module` (its buffer assignment, live ranges and optimized HLO)."""
  def newest(suffix):
    paths = sorted(glob.glob(os.path.join(dump_dir, f"module_*.{module}.{suffix}")))
    if not paths:
      raise FileNotFoundError(f"no {suffix} dump of {module} in {dump_dir}")
    with open(paths[-1]) as f:
      return f.read()
  allocations = parse_buffer_assignment(newest("cpu_after_optimizations-buffer-assignment.txt"))
  instructions = parse_instructions(newest("cpu_after_optimizations.txt"))
  shapes = {v["name"]: v["shape"] for a in allocations for v in a["values"]}
  params = {v["name"]: a["parameter"] for a in allocations if a["kind"] == "parameter"
            for v in a["values"]}
  sums = {}
  for a in allocations:
    sums[a["kind"]] = sums.get(a["kind"], 0) + a["size"]
  peak = parse_live_peak(newest("cpu_after_optimizations-live-range.txt"))
  buffers = []
  for b in sorted(peak, key=lambda b: -b["bytes"])[:top]:
    opcode, op_name = instructions.get(b["name"], ("", ""))
    shape = shapes.get(b["name"], "")
    buffers.append(dict(name=b["name"], bytes=b["bytes"], shape=shape, opcode=opcode,
                        op_name=op_name[-200:], parameter=params.get(b["name"])))
  temps = sorted((v for a in allocations if a["kind"] == "temp" for v in a["values"]),
                 key=lambda v: -v["size"])[:top]
  return dict(allocation_bytes=sums, peak_live_bytes=sum(b["bytes"] for b in peak),
              peak_live=buffers,
              largest_temps=[dict(v, opcode=instructions.get(v["name"], ("", ""))[0],
                                  op_name=instructions.get(v["name"], ("", ""))[1][-200:])
                             for v in temps])


# ---- the child: build the run's components and compile one step's programs -------------

def _nbytes(tree) -> int:
  import jax  # noqa: PLC0415
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def _status_bytes(field: str) -> int:
  """VmRSS / VmHWM of this process from /proc/self/status, in bytes (0 where absent)."""
  try:
    with open("/proc/self/status") as f:
      line = next((row for row in f if row.startswith(field + ":")), "")
  except OSError:
    return 0
  return int(line.split()[1]) * 1024 if line else 0


def compile_measured(lowered):
  """(compiled, bytes the compile raised this process's RSS above where it started):
  the compiler's own working memory, as the trainer's first step of a shape pays
  it. The kernel's high-water mark is reset first (`/proc/self/clear_refs`)."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
  except OSError:  # not Linux: the mark then only grows, and the delta is a lower bound
    pass
  before = _status_bytes("VmRSS")
  compiled = lowered.compile()
  return compiled, max(0, _status_bytes("VmHWM") - before)


def _memory(compiled) -> dict:
  stats = compiled.memory_analysis()
  out = {k: int(getattr(stats, f)) for k, f in MEMORY_FIELDS.items()}
  out["total_bytes"] = (out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
                        + out["temp_bytes"])
  return out


def step_programs(c, spec: dict):
  """One step's programs as [(name, jitted, args, kwargs)] over abstract inputs, in
  the order a step runs them; host-side bytes from shapes; the sizes `categorize`
  reads (`dims`)."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  from rl_post.sampling import engine, sampler  # noqa: PLC0415
  from rl_post.training import state as state_lib  # noqa: PLC0415

  rl, tok = c.rl, c.ctx.tokenizer
  state = c.abstract_state()
  n, p = rl.rollouts_per_step, spec["prompt_len"]
  capacity = p + rl.max_new_tokens
  programs, host = [], dict(params_bytes=_nbytes(state.params),
                            frozen_bytes=_nbytes(state.frozen),
                            opt_state_bytes=_nbytes(state.opt_state))
  host["state_bytes"] = _nbytes(state)
  policy = state.params
  host["sampler_params_bytes"] = 0
  if state.frozen is not None:  # the sampler's params: the base with the adapters merged in
    args = (state.frozen, state.params, rl.lora.scale)  # what c.policy_params compiles
    programs.append(("lora_merge", state_lib.merged_blocks, args, {}))
    host["sampler_params_bytes"] = _nbytes(jax.eval_shape(state_lib.merged_blocks, *args))
    policy = jax.eval_shape(c.policy_params, state)  # its other leaves are the base's own
  if rl.rollout_precision != "float32":
    programs.append(("rollout_copy", c.rollout_copy, (policy,), {}))
    policy = jax.eval_shape(c.rollout_copy, policy)
    host["sampler_params_bytes"] += _nbytes(policy)
  mc = c.rollout_config
  weights = jax.eval_shape(engine.decode_weights, mc, policy)
  programs.append(("decode_weights", engine.decode_weights, (mc, policy), {}))
  host["decode_weights_bytes"] = _nbytes(weights)
  i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)
  prefill_args = (policy, i32(n, p), i32(n), i32(n), i32(n), weights)
  prefill_kw = dict(model_config=mc, capacity=capacity, group_size=rl.num_generations,
                    pad_id=tok.pad_id)
  programs.append(("prefill", engine.prefill, prefill_args, prefill_kw))
  decode_state = jax.eval_shape(lambda *a: engine.prefill(*a, **prefill_kw), *prefill_args)
  host["kv_cache_bytes"] = _nbytes(decode_state.caches)
  host["decode_state_bytes"] = _nbytes(decode_state)
  device_config = sampler._with_eos(c.sampling, tok.eos_id).device_key()  # as sampler._run
  programs.append(("decode", engine.decode, (policy, decode_state, i32(), None, weights),
                   dict(model_config=mc, config=device_config, pad_id=tok.pad_id)))
  width, prefix = spec["width"] or capacity, spec["prefix_len"]
  if rl.needs_reference or rl.recomputes_logp:
    if rl.needs_reference and state.frozen is not None:  # the base (an int8 one dequantized)
      ref = jax.eval_shape(lambda s: c.reference_params(s, None), state)
    elif rl.needs_reference:  # start_state.reference_copy: the policy in rl.ref_dtype
      ref = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, rl.ref_dtype), policy)
    else:  # the masters' own log-probs (rl.recomputes_logp)
      ref = policy
    programs.append(("ref_logprobs", c.ref_fn_for(prefix), (ref, i32(n, width), i32(n, width)),
                     {}))
  rows = n // rl.num_minibatches
  dtypes = dict(tokens=jnp.int32, mask=jnp.int32)
  batch = {k: jax.ShapeDtypeStruct((rows, width), dtypes.get(k, jnp.float32),
                                   sharding=c.batch_sharding[k]) for k in c.batch_sharding}
  host["batch_bytes"] = _nbytes(batch)
  programs.append(("update", c.step_fn_for(prefix), (state, batch), {}))
  dims = dict(L=c.model_config.num_layers, E=c.model_config.embed_dim,
              V=c.model_config.vocab_size, N=n, T=width, S=capacity,
              D=c.model_config.head_dim)
  return programs, host, dims


def phases(host: dict, programs: dict) -> dict:
  """Resident bytes of the rollout's decode (the state, the sampler's params and
  weights, the decode program) and of the update (the state, batch and program)."""
  decode, update = programs["decode"]["memory"], programs["update"]["memory"]
  rollout = (host["state_bytes"] + host["sampler_params_bytes"] + host["decode_weights_bytes"]
             + host["decode_state_bytes"] + decode["temp_bytes"]
             + decode["output_bytes"] - decode["alias_bytes"])
  train = (host["state_bytes"] + host["batch_bytes"] + update["temp_bytes"]
           + update["output_bytes"] - update["alias_bytes"])
  return dict(rollout_bytes=int(rollout), update_bytes=int(train))


def compile_setting(spec: dict) -> dict:
  """Runs in the child (XLA_FLAGS dumping to spec["dump_dir"]): the run's components,
  then each program lowered, compiled and read back from its dump."""
  from rl_post.rl.components import RLComponents  # noqa: PLC0415
  from rl_post.training.run import scoped_run  # noqa: PLC0415

  config, flags = run_config(spec)

  @scoped_run
  def build(config, workdir):
    c = RLComponents(config, workdir)
    programs, host, dims = step_programs(c, spec)
    out = {}
    for name, fn, args, kwargs in programs:
      compiled, compile_rss = compile_measured(fn.lower(*args, **kwargs))
      module = compiled.as_text().split(None, 2)[1].rstrip(",")
      out[name] = dict(module=module, memory=_memory(compiled), compile_rss_bytes=compile_rss,
                       **program_buffers(spec["dump_dir"], module, spec["top"]))
    model = {k: getattr(c.model_config, k) for k in ("num_layers", "embed_dim", "num_heads",
                                                     "num_kv_heads", "head_dim", "mlp_dim",
                                                     "vocab_size", "dtype")}
    return dict(name=spec["setting"], flags=flags, model=model, dims=dims, host=host,
                programs=out, phases=phases(host, out),
                rl=dict(rows=c.rl.rollouts_per_step, remat=c.rl.remat,
                        logprob_chunk=c.rl.logprob_chunk, grad_accum=c.rl.grad_accum,
                        max_new_tokens=c.rl.max_new_tokens, shared_prefix=c.rl.shared_prefix))

  with tempfile.TemporaryDirectory() as workdir:
    return build(config, workdir)


def run_child(spec: dict) -> dict:
  """One setting compiled in a child process whose XLA dumps go to a temporary folder."""
  with tempfile.TemporaryDirectory() as dump_dir:
    spec = dict(spec, dump_dir=dump_dir)
    env = dict(os.environ, PYTHONPATH=child_runs.ROOT, RL_POST_COMPILE_CACHE="",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                          f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_text").strip())
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # a cache hit would compile (and dump) nothing
    proc = subprocess.run([sys.executable, "-m", "experiments.benchmarks.step_buffers",
                           "--child", json.dumps(spec)], cwd=child_runs.ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
      raise RuntimeError(f"child for {spec['setting']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def with_categories(setting: dict) -> dict:
  """Names each peak buffer of `setting` (a child's report) with `categorize`."""
  dims = dict(setting["dims"], K=setting["model"]["num_kv_heads"])
  for name, program in setting["programs"].items():
    for b in program["peak_live"] + program["largest_temps"]:
      b["category"] = categorize(name, b["opcode"], b["op_name"], b["shape"], dims)
  return setting


# ---- the report ---------------------------------------------------------------------------

def table(settings: list[dict], top: int = 6) -> str:
  mib = lambda b: f"{b / 2**20:9.1f}"
  lines = []
  for s in settings:
    h = s["host"]
    lines.append(f"== {s['name']}: state {mib(h['state_bytes'])} MiB (trainable params "
                 f"{mib(h['params_bytes'])}, frozen base {mib(h['frozen_bytes'])}, optimizer "
                 f"{mib(h['opt_state_bytes'])}); sampler params {mib(h['sampler_params_bytes'])}"
                 f", decode weights {mib(h['decode_weights_bytes'])}, KV cache "
                 f"{mib(h['kv_cache_bytes'])}, batch {mib(h['batch_bytes'])} MiB")
    lines.append(f"{'program':>15} {'args MiB':>9} {'out MiB':>9} {'alias MiB':>9} "
                 f"{'temp MiB':>9} {'total MiB':>9} {'compile RSS MiB':>15}")
    for name, p in s["programs"].items():
      m = p["memory"]
      lines.append(f"{name:>15} {mib(m['argument_bytes'])} {mib(m['output_bytes'])} "
                   f"{mib(m['alias_bytes'])} {mib(m['temp_bytes'])} {mib(m['total_bytes'])} "
                   f"{mib(p['compile_rss_bytes']):>15}")
    for name, p in s["programs"].items():
      for b in p["peak_live"][:top]:
        lines.append(f"{name:>15}   {mib(b['bytes'])} MiB  {b['category']:<28} "
                     f"{b['shape']:<24} {b['name']}")
    ph = s["phases"]
    lines.append(f"resident estimate: rollout {mib(ph['rollout_bytes'])} MiB, update "
                 f"{mib(ph['update_bytes'])} MiB")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                      help=f"comma-separated settings, from {SETTINGS}")
  parser.add_argument("--new_tokens", type=int, default=128, help="rl.max_new_tokens")
  parser.add_argument("--prompt_len", type=int, default=128,
                      help="the prompts' bucketed width (the config's first prompt bucket)")
  parser.add_argument("--prefix_len", type=int, default=48,
                      help="the update's shared-prefix rung (48: what SmolLM2 runs reach)")
  parser.add_argument("--width", type=int, default=0,
                      help="the update's width (0: prompt_len + new_tokens, untrimmed)")
  parser.add_argument("--grad_accum", type=int, default=1,
                      help="rl.grad_accum (1: the update in one batch, as lora_step.py)")
  parser.add_argument("--rank", type=int, default=16, help="LoRA rank r (> 0)")
  parser.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha")
  parser.add_argument("--block_size", type=int, default=64, help="4-bit block length")
  parser.add_argument("--targets", default=",".join(lora_step.TARGETS),
                      help="comma-separated projections that get adapters")
  parser.add_argument("--top", type=int, default=12, help="largest buffers kept per program")
  parser.add_argument("--jobs", type=int, default=1,
                      help="settings compiled at once (one child process each)")
  parser.add_argument("--smoke", action="store_true",
                      help="a 2-layer model over the config's tiny variant")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "step_buffers.json"))
  args = parser.parse_args(argv)
  if args.child is not None:
    print(json.dumps(compile_setting(json.loads(args.child))))
    return None
  names = tuple(s for s in args.settings.split(",") if s)
  if not names or set(names) - set(SETTINGS) or len(set(names)) != len(names):
    parser.error(f"--settings must name some of {SETTINGS} once each, got {args.settings!r}")
  if min(args.rank, args.top, args.jobs, args.grad_accum) < 1:
    parser.error("--rank, --top, --jobs and --grad_accum must be >= 1")
  targets = tuple(t for t in args.targets.split(",") if t)
  if not targets or set(targets) - set(lora_step.TARGETS):
    parser.error(f"--targets must name some of {lora_step.TARGETS}, got {args.targets!r}")
  if args.smoke:
    args.prompt_len, args.prefix_len = 8, 0  # the tiny variant's prompts are short
  spec = dict(smoke=args.smoke, new_tokens=args.new_tokens, prompt_len=args.prompt_len,
              prefix_len=args.prefix_len, width=args.width, grad_accum=args.grad_accum,
              rank=args.rank, alpha=args.alpha,
              block_size=args.block_size, targets=targets, top=args.top)
  with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:  # children compile apart
    settings = list(pool.map(lambda name: with_categories(run_child(dict(spec, setting=name))),
                             names))
  from rl_post.metrics import host_cpu  # noqa: PLC0415
  result = dict(config=smollm2_step.CONFIG + (":tiny" if args.smoke else ""), **spec,
                cpu=host_cpu.describe(), settings=settings)
  return child_runs.write_result(args.out, result, table(settings))


if __name__ == "__main__":
  main()
