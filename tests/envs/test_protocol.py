"""Protocol parsing: every defect is a counted ProtocolError, in linear time."""

import pytest

from rl_post.envs import protocol, tools
from rl_post.envs.protocol import ProtocolError, ToolCall, parse_tool_call
from rl_post.envs.tools import ToolLimits, Workspace, plan_call


def test_well_formed_call_and_no_call():
  text = 'I will look.\n' + protocol.format_call("bash", {"command": "ls"})
  assert parse_tool_call(text) == ToolCall("bash", {"command": "ls"})
  assert parse_tool_call("just an answer") is None
  # Only the last call counts; an earlier quoted call is ignored.
  two = protocol.format_call("sql", {"query": "x"}) + " then " + protocol.format_call("submit", {})
  assert parse_tool_call(two).name == "submit"


@pytest.mark.parametrize("text,kind", [
    ("<tool_call>{not json</tool_call>", "malformed_json"),
    ("<tool_call>" + "[" * 10000 + "</tool_call>", "malformed_json"),
    ("</tool_call>", "bad_call"),
    ("<tool_call>[1, 2]</tool_call>", "bad_call"),
    ('<tool_call>{"name": 3}</tool_call>', "bad_call"),
    ('<tool_call>{"name": "bash", "arguments": []}</tool_call>', "bad_call"),
    ('<tool_call>{"name": "bash", "arguments": {}, "x": 1}</tool_call>', "bad_call"),
    ('<tool_call>{"name": "' + "a" * 20000 + '"}</tool_call>', "call_too_long"),
])
def test_malformed_calls_are_errors(text, kind):
  error = parse_tool_call(text)
  assert isinstance(error, ProtocolError) and error.kind == kind


@pytest.mark.parametrize("call,kind", [
    (ToolCall("rm_rf", {}), "unknown_tool"),
    (ToolCall("bash", {}), "bad_arguments"),
    (ToolCall("bash", {"command": 1}), "bad_arguments"),
    (ToolCall("bash", {"command": "ls", "sudo": True}), "bad_arguments"),
    (ToolCall("submit", {"answer": ["x"]}), "bad_arguments"),
])
def test_invalid_calls_never_run(call, kind):
  planned = plan_call(call, Workspace(files={}), ("bash", "submit"), ToolLimits())
  assert planned.request is None and planned.error.kind == kind
  outcome = tools.finish_call(planned, Workspace(files={}), None, ToolLimits())
  assert outcome.error_kind == kind and outcome.observation.startswith(f"error ({kind})")


def test_budget_exhausted_refuses_to_run():
  limits = ToolLimits(per_call_s=2.0, per_episode_s=3.0)
  ws = Workspace(files={}, tool_seconds=2.5)
  planned = plan_call(ToolCall("bash", {"command": "ls"}), ws, ("bash",), limits)
  assert planned.request.timeout_s == pytest.approx(0.5)
  ws.tool_seconds = 2.95
  planned = plan_call(ToolCall("bash", {"command": "ls"}), ws, ("bash",), limits)
  assert planned.request is None and planned.error.kind == "budget_exhausted"


class _CountingText(str):
  """A str whose rfind calls and scanned lengths are recorded."""
  scans: list

  def rfind(self, sub, start=0, end=None):
    end = len(self) if end is None else end
    self.scans.append(end - start)
    return super().rfind(sub, start, end)


def test_parsing_is_linear(monkeypatch):
  # Linear by construction: two backward scans of the text and one JSON parse of the
  # last call's body, however many call tags the text holds (no time is measured).
  decoded = []
  real_loads = protocol.json.loads
  monkeypatch.setattr(protocol.json, "loads", lambda body: decoded.append(len(body))
                      or real_loads(body))
  for n in (1_000, 100_000):
    text = _CountingText("x" * n + "<tool_call>" * (n // 20) + '{"name": "a"}</tool_call>')
    text.scans, decoded[:] = [], []
    assert parse_tool_call(text, max_call_chars=10 * n) == ToolCall("a", {})
    assert len(text.scans) == 2 and sum(text.scans) <= 2 * len(text)
    assert decoded == [len('{"name": "a"}')]


def test_truncate_keeps_the_marker_within_the_limit():
  text, cut = protocol.truncate("a" * 500, 100)
  kept = text.index("\n[")
  assert cut and len(text) <= 100 and text[:kept] == "a" * kept
  assert f"{500 - kept} more chars" in text
  assert protocol.truncate("abc", 10) == ("abc", False)
  assert protocol.truncate("a" * 50, 10) == ("a" * 10, True)  # no room for the marker
  for n in (9_999, 10_000, 10_001, 100_000):  # where the count gains a digit
    for limit in range(30, 60):
      text, cut = protocol.truncate("b" * n, limit)
      assert cut and len(text) <= limit
