"""Name -> Tool; the one place tools are looked up.

A tool spec is a registered name ("bash") or an import path
"package.module:ClassName" of a `Tool` subclass, so a tool defined outside
the package loads from a config line (`episodes.tools`) or an `Env`'s
`tools` without registration code, like task domains
(`rl_post.tasks.registry`).
"""

from typing import Iterable, Mapping, Union

from rl_post.envs import specs
from rl_post.envs.tools.base import Tool
from rl_post.envs.tools.bash import Bash
from rl_post.envs.tools.python import Python
from rl_post.envs.tools.sql import Sql
from rl_post.envs.tools.submit import Submit

_TOOLS: dict[str, type] = {cls.name: cls for cls in (Python, Bash, Sql, Submit)}

ToolSpec = Union[str, Tool]


def check_tool_class(cls, where: str):
  """Raises ValueError, naming `where`, unless `cls` is a usable Tool subclass."""
  if not (isinstance(cls, type) and issubclass(cls, Tool)):
    raise ValueError(f"tool {where!r} is not a Tool subclass (rl_post.envs.tools.Tool)")
  if not isinstance(cls.name, str) or not cls.name:
    raise ValueError(f"tool {where!r} must set name to a non-empty str, got {cls.name!r}")
  if not isinstance(cls.description, str) or not cls.description:
    raise ValueError(f"tool {where!r} must set description to a non-empty str")
  if not isinstance(cls.arguments, Mapping) or not all(
      isinstance(arg, str) and isinstance(spec, tuple) and len(spec) == 2
      and isinstance(spec[0], type) and isinstance(spec[1], bool)
      for arg, spec in cls.arguments.items()):
    raise ValueError(f"tool {where!r}: arguments must map names to (type, required: bool), "
                     f"got {cls.arguments!r}")
  method = "request" if cls.sandboxed else "answer"
  if getattr(cls, method) is getattr(Tool, method):
    raise ValueError(f"tool {where!r} has sandboxed={cls.sandboxed} and must define {method}()")


def is_known(spec: str) -> bool:
  return spec in _TOOLS or ":" in spec


def make_tool(spec: ToolSpec) -> Tool:
  """The tool named by `spec` (a registered name or "module:Class"); a Tool passes through."""
  if isinstance(spec, Tool):
    check_tool_class(type(spec), repr(spec))
    return spec
  if not isinstance(spec, str):
    raise ValueError(f"a tool is a name, 'module:Class' or a Tool, got {spec!r}")
  if ":" in spec:
    cls = specs.import_class(spec, "tool")
    check_tool_class(cls, spec)
    return cls()
  if spec not in _TOOLS:
    raise ValueError(f"unknown tool {spec!r}; registered: {available()} (or use 'module:Class')")
  return _TOOLS[spec]()


def toolset(tool_specs: Iterable[ToolSpec]) -> dict:
  """name -> Tool for the specs, in order of first appearance.

  A tool listed twice is offered once; two different classes under one name
  are refused (ValueError).
  """
  tools = {}
  for spec in tool_specs:
    tool = make_tool(spec)
    seen = tools.setdefault(tool.name, tool)
    if type(seen) is not type(tool):
      raise ValueError(f"two different tools are named {tool.name!r}: "
                       f"{type(seen).__name__} and {type(tool).__name__}")
  return tools


def available() -> list:
  return sorted(_TOOLS)
