"""A call's two halves around the sandbox: `plan_call` and `finish_call`.

A call is handled in two halves so that the calls of many episodes go
through one `Sandbox.run_many`: `plan_call` validates it and has its tool
build the `RunRequest` (or leaves it to a host-side tool), `finish_call`
turns the `ExecResult` into the observation and lets the tool update the
episode's workspace. Neither knows any particular tool.

Budgets. Each call runs with `min(per_call_s, what is left of
per_episode_s)`; the sandbox's measured wall time of every run is charged
to the episode, and a call with less than `min_call_s` left is refused
("budget_exhausted") without running. Host-side tools are not charged.

Every observation `finish_call` returns (tool output and the notes appended
to it, error messages that echo the model's names, host-side answers) is
bounded by `max_output_chars` and is encodable text (`protocol.bound`).
"""

import dataclasses
from typing import Any, Mapping, Optional

from rl_post.envs import protocol
from rl_post.envs.protocol import ProtocolError
from rl_post.envs.tools import registry
from rl_post.envs.tools.base import REJECTED, CallOutcome, Tool, ToolLimits, Workspace, status_kind
from rl_post.sandbox import ExecResult, RunRequest
from rl_post.sandbox import request as request_lib
from rl_post.sandbox import result as result_lib


@dataclasses.dataclass(frozen=True)
class PlannedCall:
  """A validated call: `request` to run, a host-side `handler`, or an `error`."""
  tool: str                       # the tool name ("" when unparsable)
  request: Optional[RunRequest] = None
  error: Optional[ProtocolError] = None
  handler: Optional[Tool] = None
  arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def plan_call(call, workspace: Workspace, tools, limits: ToolLimits) -> PlannedCall:
  """Validates a parsed call (or carries a parse error) and builds its run.

  Args:
    call: a `protocol.ToolCall` or the `ProtocolError` parsing gave.
    workspace: the episode's state.
    tools: the tools offered: name -> Tool (`registry.toolset`), or specs.
    limits: the episode's `ToolLimits`.
  """
  if isinstance(call, ProtocolError):
    return PlannedCall("", error=call)
  toolset = tools if isinstance(tools, Mapping) else registry.toolset(tools)
  tool = toolset.get(call.name)
  if tool is None:
    return PlannedCall(call.name if len(call.name) <= 40 else "", error=ProtocolError(
        "unknown_tool", f"no tool {call.name[:40]!r}; available: {', '.join(toolset)}"))
  error = tool.check(call.arguments)
  if error is not None:
    return PlannedCall(call.name, error=error)
  if not tool.sandboxed:
    return PlannedCall(call.name, handler=tool, arguments=call.arguments)
  left = limits.per_episode_s - workspace.tool_seconds
  if left < limits.min_call_s:
    return PlannedCall(call.name, error=ProtocolError(
        "budget_exhausted", f"the episode's tool time ({limits.per_episode_s} s) is spent"))
  request = tool.request(call.arguments, workspace, timeout_s=min(limits.per_call_s, left),
                         memory_mb=limits.memory_mb)
  return PlannedCall(call.name, request=request, handler=tool, arguments=call.arguments)


def finish_call(planned: PlannedCall, workspace: Workspace, result: Optional[ExecResult],
                limits: ToolLimits) -> CallOutcome:
  """Applies a call's result to the workspace; returns what the model sees.

  Every observation, errors and host-side answers included, is at most
  `limits.max_output_chars` characters of encodable text (`protocol.bound`).
  """
  max_chars = limits.max_output_chars
  if planned.error is not None:
    text, _ = protocol.bound(protocol.format_error(planned.error), "", max_chars)
    return CallOutcome(planned.tool, text, planned.error.kind)
  tool = planned.handler
  if not tool.sandboxed:
    outcome = tool.answer(planned.arguments, workspace)
    text, _ = protocol.bound(outcome.observation, "", max_chars)
    return dataclasses.replace(outcome, observation=text)
  seconds = float(result.wall_s)
  workspace.tool_seconds += seconds
  kind = status_kind(result)
  note = ""
  if result.status != "sandbox_error":
    note = tool.apply(planned.arguments, workspace, result)
  text, cut = protocol.bound(tool.output(planned.arguments, result), note, max_chars)
  if cut and kind is None:
    kind = "output_truncated"
  return CallOutcome(planned.tool, text, kind, seconds)


def run_planned(sandbox, planned: list) -> list:
  """ExecResults for the planned calls that need a run (None for the rest).

  All runs go through one `run_many`. A request the sandbox rejects (e.g.
  a work dir grown past `max_input_bytes`) becomes a sandbox_error result
  for that call alone.
  """
  out = [None] * len(planned)
  valid = []
  for i, p in enumerate(planned):
    if p is None or p.request is None:
      continue
    try:
      request_lib.to_wire(sandbox.config, p.request)
      valid.append(i)
    except ValueError as e:
      out[i] = result_lib.sandbox_error(f"{REJECTED} {e}")
  if valid:
    for i, result in zip(valid, sandbox.run_many([planned[i].request for i in valid])):
      out[i] = result
  return out
