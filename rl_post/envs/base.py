"""The environment interface: multi-turn episodes with tools and a final verifier.

  env = SomeEnv(limits=ToolLimits(), max_turns=8)
  observation = env.reset(task)                       # the first prompt text
  observation, done, info = env.step(turn_text, sandbox)
  reward = env.final_reward(sandbox)                  # verifier on the end state

`step` takes the model's turn (text that, unless the episode is ending,
ends with `<tool_call>{json}</tool_call>`), runs the call and returns the
`<tool_response>` text to append. A turn without a tool call ends the
episode; so do `submit` and `max_turns`. Single-turn domains are the case
with no tools: the first turn ends the episode and the domain's verifier
scores the transcript (`SingleTurnEnv`).

Every step is split into `plan` (parse, validate, build the sandbox
request) and `complete` (apply the result), so a batch of episodes runs
its tool calls through one `Sandbox.run_many` (`rl_post.envs.driver`);
`step` is the one-episode composition of the two. Final verification is
split the same way: `verification_request` (run in a *fresh* sandbox run,
on a snapshot of the end state) and `score`; `reward_from` turns the run's
result into the reward. A verification run the sandbox rejects (e.g. an end
state over its `max_input_bytes`) or fails scores 0 and sets
`verify_error`, which the drivers count (`EpisodeMetrics.verify_errors`);
nothing raises.

Call counts, for the call-success shaping term
(`rl_post.envs.trainer_rounds`): `calls` counts every turn that ended with
a call; `tool_calls` the same less the call that ended the episode
(`submit`), so giving up is not a call; `call_successes` those of
`tool_calls` whose tool ran: no error, or an error of the program itself
(`protocol.RAN_KINDS`: a test run whose tests fail succeeds). A call that
does not parse, names no offered tool, has bad arguments, finds the budget
spent or that the sandbox rejects or fails is not a success.
"""

import abc
import dataclasses
from typing import Optional, Sequence

from rl_post.envs import protocol, tools
from rl_post.envs.tools import CallOutcome, PlannedCall, ToolLimits, Workspace
from rl_post.sandbox import ExecResult, RunRequest
from rl_post.tasks.base import Task

INSTRUCTIONS = (
    "You can call tools. To call one, end your turn with\n"
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>\n'
    "and wait for the <tool_response>. Tools:\n")


@dataclasses.dataclass(frozen=True)
class StepInfo:
  tool: str                   # "" when there was no (parsable) call
  error_kind: Optional[str]   # None: success (or no call)
  seconds: float              # sandbox time of this call
  turn: int                   # turns taken so far, this one included
  called: bool                # the turn ended with a tool call (even a bad one)


class Env(abc.ABC):
  """One episode at a time; reusable across episodes via `reset`.

  `tools` (class attribute) names the tools the domain offers, each a
  registered name or "module:Class" (`rl_post.envs.tools.registry`);
  `extra_tools` (specs or `Tool`s) adds more per instance (the config's
  `episodes.tools`); a tool offered twice is listed once.
  """

  tools: tuple = ()

  def __init__(self, limits: ToolLimits = ToolLimits(), max_turns: int = 8,
               extra_tools: Sequence = ()):
    if not isinstance(max_turns, int) or max_turns < 1:
      raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
    self.limits = limits
    self.max_turns = max_turns
    self.toolset = tools.toolset(tuple(self.tools) + tuple(extra_tools))  # name -> Tool
    self.task: Optional[Task] = None
    self.workspace: Optional[Workspace] = None
    self.transcript = ""
    self.turns = 0
    self.calls = 0
    self.tool_calls = 0
    self.call_successes = 0
    self.verify_error: Optional[str] = None
    self.done = True

  # -- what a domain defines ---------------------------------------------
  @abc.abstractmethod
  def initial_workspace(self, task: Task) -> Workspace:
    """The episode's starting files / database (fresh objects per episode)."""

  @abc.abstractmethod
  def verification_request(self) -> Optional[RunRequest]:
    """The run that checks the end state (None: scored on the host alone)."""

  @abc.abstractmethod
  def score(self, result: Optional[ExecResult], sandbox=None) -> float:
    """The final reward in [0, 1] from the verification run's result."""

  # -- the episode -------------------------------------------------------
  def prompt(self, task: Task) -> str:
    if not self.toolset:
      return task.prompt
    listing = "".join(f"- {tool.description}\n" for tool in self.toolset.values())
    return f"{task.prompt}\n\n{INSTRUCTIONS}{listing}"

  def reset(self, task: Task) -> str:
    self.task = task
    self.workspace = self.initial_workspace(task)
    self.transcript = ""
    self.turns = 0
    self.calls = 0
    self.tool_calls = 0
    self.call_successes = 0
    self.verify_error = None
    self.done = False
    return self.prompt(task)

  def plan(self, turn_text: str) -> Optional[PlannedCall]:
    """Parses the turn; None when it has no tool call (the episode ends)."""
    if self.done:
      raise RuntimeError("step on a finished episode; call reset(task)")
    self.transcript += turn_text
    self.turns += 1
    if not self.toolset:
      return None
    call = protocol.parse_tool_call(turn_text)
    if call is None:
      return None
    return tools.plan_call(call, self.workspace, self.toolset, self.limits)

  def complete(self, planned: Optional[PlannedCall], result: Optional[ExecResult]):
    """(observation, done, info) after the planned call ran (result) or not."""
    if planned is None:
      self.done = True
      return "", True, StepInfo("", None, 0.0, self.turns, False)
    outcome: CallOutcome = tools.finish_call(planned, self.workspace, result, self.limits)
    self.calls += 1
    if not outcome.submitted:
      self.tool_calls += 1
      self.call_successes += int(outcome.error_kind is None
                                 or outcome.error_kind in protocol.RAN_KINDS)
    self.done = outcome.submitted or self.turns >= self.max_turns
    # A finished episode has no next turn, so the last response is not shown
    # (its effect on the workspace, e.g. a final edit, stays).
    observation = "" if self.done else protocol.format_response(outcome.observation)
    self.transcript += observation
    return observation, self.done, StepInfo(outcome.tool, outcome.error_kind, outcome.seconds,
                                            self.turns, True)

  def end_out_of_context(self, observation: str):
    """Ends the episode because `observation` does not fit in the sequence."""
    if self.transcript.endswith(observation):
      self.transcript = self.transcript[:len(self.transcript) - len(observation)]
    self.done = True

  def step(self, turn_text: str, sandbox):
    planned = self.plan(turn_text)
    result = None
    if planned is not None and planned.request is not None:
      result = tools.run_planned(sandbox, [planned])[0]
    return self.complete(planned, result)

  def final_reward(self, sandbox) -> float:
    """The verifier's reward on the end state (one env; `driver.final_rewards` batches)."""
    request = self.verification_request()
    result = None
    if request is not None:
      result = tools.run_planned(sandbox, [PlannedCall("verify", request=request)])[0]
    return self.reward_from(result, sandbox)

  def reward_from(self, result: Optional[ExecResult], sandbox=None) -> float:
    """The reward given the verification run's result (None: no run).

    A run with status "sandbox_error" (a request the sandbox rejected, such
    as an end state over its `max_input_bytes`, or a failure of the sandbox
    itself) scores 0 and sets `verify_error`; any other result goes to `score`.
    """
    self.verify_error = None
    if result is not None and result.status == "sandbox_error":
      self.verify_error = "sandbox_error"
      return 0.0
    return float(self.score(result, sandbox))


class SingleTurnEnv(Env):
  """A single-turn domain (`rl_post.tasks`) as the episode with no tool calls."""

  tools = ()

  def __init__(self, domain, limits: ToolLimits = ToolLimits()):
    super().__init__(limits, max_turns=1)
    self.domain = domain

  def initial_workspace(self, task):
    return Workspace(files={})

  def verification_request(self):
    return None

  def score(self, result, sandbox=None):
    return float(self.domain.verify(self.task, self.transcript, sandbox=sandbox).score)
