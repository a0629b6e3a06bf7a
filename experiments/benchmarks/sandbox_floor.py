"""The cost floor of one strict execution: what the kernel charges per run.

  sudo python experiments/benchmarks/sandbox_floor.py --ops=300

A strict run needs, at the least, one clone of the warm interpreter into
fresh user, pid, net, mount, ipc and uts namespaces (its pid 1) and one
fork of it (the candidate), each followed by an exit. This measures those
primitives on their own, with no Python work in the children, in the same
interpreter image as a worker (the sandbox's python with the default
preloads, gc frozen). Each figure is machine-wide CPU per operation
(/proc/stat user+nice+system+irq+softirq, so the kernel's deferred
namespace teardown is counted). The fork is also measured with the child
compiling and running a snippet, which gives the floor of a strict run of
that snippet. sandbox.py runs this too and puts the floor
beside its table. Needs root (or unprivileged user namespaces).
"""

import json
import os
import subprocess

from absl import app
from absl import flags

from rl_post.sandbox import SandboxConfig
from rl_post.sandbox import launcher

_OPS = flags.DEFINE_integer("ops", 300, "Operations per primitive.")

# Runs inside `python -I -S` (the sandbox interpreter), stdlib + jail.py.
_PROBE = r'''
import gc, importlib, json, os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[5]]
import jail
import machine_cpu
for name in filter(None, sys.argv[2].split(",")):
  try:
    importlib.import_module(name)
  except Exception:
    pass
ops = int(sys.argv[3])
snippets = json.loads(sys.argv[4])
devnull = os.open("/dev/null", os.O_WRONLY)

def fork_exit():
  pid = os.fork()
  if pid == 0:
    os._exit(0)
  os.waitpid(pid, 0)

def fork_run_exit(code):
  def op():
    pid = os.fork()
    if pid == 0:
      os.dup2(devnull, 1)
      exec(compile(code, "main.py", "exec"), {"__name__": "__main__"})
      sys.stdout.flush()
      os._exit(0)
    os.waitpid(pid, 0)
  return op

def clone_exit(flags):
  def op():
    pid = jail.clone_into_run_namespaces(flags)
    if pid == 0:
      os._exit(0)
    os.waitpid(pid, 0)
  return op

gc.collect()
gc.freeze()
prims = {
    "fork + exit of the warm interpreter": fork_exit,
    "clone into user+pid+mount+ipc+uts namespaces + exit":
        clone_exit(jail.RUN_NAMESPACES & ~jail.CLONE_NEWNET),
    "clone into all six run namespaces (+ net) + exit":
        clone_exit(jail.RUN_NAMESPACES),
}
for name, code in snippets.items():
  prims[f"fork + run the {name} snippet + exit"] = fork_run_exit(code)
out = {}
for name, op in prims.items():
  for _ in range(20):
    op()
  c0, t0 = machine_cpu.busy_s(), time.monotonic()
  for _ in range(ops):
    op()
  wall = time.monotonic() - t0
  time.sleep(0.5)  # let deferred teardown (netns cleanup) finish
  out[name] = {"cpu_ms": 1e3 * (machine_cpu.busy_s() - c0) / ops,
               "wall_ms": 1e3 * wall / ops}
print(json.dumps(out))
'''


_CLONE = "clone into all six run namespaces (+ net) + exit"
_FORK = "fork + exit of the warm interpreter"
_SNIPPETS = {"trivial": "print(1)"}


def measure(ops, config=None, snippets=None):
  """{primitive: {"cpu_ms", "wall_ms"}} per operation.

  snippets: {name: python code}; each adds "fork + run the <name> snippet +
  exit" (the child compiles and runs the code, stdout to /dev/null).
  """
  config = config or SandboxConfig()
  snippets = _SNIPPETS if snippets is None else snippets
  inner = os.path.dirname(launcher.__file__) + "/inner"
  proc = subprocess.run(
      [config.python_executable, "-I", "-S", "-c", _PROBE, inner,
       ",".join(config.preload_modules), str(ops), json.dumps(snippets),
       os.path.dirname(os.path.abspath(__file__))],
      capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"floor probe failed: {proc.stderr[-2000:]}")
  return json.loads(proc.stdout)


def strict_floor_ms(floor, snippet=None):
  """CPU of the cheapest possible strict run: namespaces clone + one fork.

  With `snippet`, the fork also runs that snippet (as measure() named it):
  the floor of a strict run of that code, before any sandbox bookkeeping.
  """
  fork = _FORK if snippet is None else f"fork + run the {snippet} snippet + exit"
  return floor[_CLONE]["cpu_ms"] + floor[fork]["cpu_ms"]


def main(argv):
  del argv
  floor = measure(_OPS.value)
  print("| primitive | machine CPU ms/op | wall ms/op |\n|---|---|---|")
  for name, v in floor.items():
    print(f"| {name} | {v['cpu_ms']:.2f} | {v['wall_ms']:.2f} |")
  print(f"\nfloor of one strict run (clone into namespaces + one fork): "
        f"{strict_floor_ms(floor):.2f} ms CPU; running print(1): "
        f"{strict_floor_ms(floor, 'trivial'):.2f} ms")


if __name__ == "__main__":
  app.run(main)
