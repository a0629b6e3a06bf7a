"""Running verifiers and checking what they return, on the trusted side.

A verifier (worker side) produces, per completion, a plain dict: either
the raw Verdict fields or a failure {"failure": kind, "detail": text}.
`checked` (pool side) rebuilds the Verdict from the raw fields, so a
verdict whose fields were tampered with after construction (NaN, 1e300,
a float where a bool belongs, a non-Verdict object) is an
"invalid_verdict" error scored 0, never a value in the batch.
"""

from typing import Any, Mapping, Sequence

from rl_post.tasks.base import Domain, Task, Verdict, failed

FIELDS = ("score", "format_ok", "answer", "error", "components", "step_scores")


def raw_fields(result: Any) -> dict:
  """What a verifier returned, as a dict for the pipe (not validated here)."""
  if not isinstance(result, Verdict):
    return failure("invalid_verdict", f"verifier returned {type(result).__name__}, not a Verdict")
  return {name: getattr(result, name, None) for name in FIELDS}


def failure(kind: str, detail: str) -> dict:
  return {"failure": kind, "detail": detail[:500]}


def exception_failure(e: BaseException) -> dict:
  """A verifier exception: Verdict's own validation errors are invalid verdicts."""
  kind = "invalid_verdict" if isinstance(e, ValueError) and str(e).startswith(
      "Verdict.") else "verifier_error"
  return failure(kind, f"{type(e).__name__}: {e}")


def checked(fields: Mapping[str, Any]) -> tuple[Verdict, str | None]:
  """(verdict, error kind or None) from one raw dict; never raises."""
  if "failure" in fields:
    return failed(f"{fields['failure']}: {fields.get('detail', '')}"), fields["failure"]
  try:
    if set(fields) != set(FIELDS):
      raise ValueError(f"fields {sorted(fields)} are not {sorted(FIELDS)}")
    for name in ("answer", "error"):
      if fields[name] is not None and not isinstance(fields[name], str):
        raise ValueError(f"Verdict.{name} must be a str or None, got {fields[name]!r}")
    return Verdict(**fields), None
  except (ValueError, TypeError) as e:  # a Verdict built from bad fields
    return failed(f"invalid_verdict: {e}"[:500]), "invalid_verdict"


def batches_itself(domain: Domain) -> bool:
  """True if the domain grades many completions in one call (e.g. run_many)."""
  return type(domain).verify_batch is not Domain.verify_batch


def verify_unit(domain: Domain, tasks: Sequence[Task], completions: Sequence[str],
                sandbox) -> list[dict]:
  """Raw results for one unit of work: a batch call, or a single verify."""
  try:
    if batches_itself(domain):
      results = domain.verify_batch(tasks, completions, sandbox=sandbox)
      if not isinstance(results, (list, tuple)) or len(results) != len(tasks):
        return [failure("invalid_verdict", f"verify_batch returned {type(results).__name__} "
                        f"of the wrong length for {len(tasks)} completions")] * len(tasks)
      return [raw_fields(r) for r in results]
    return [raw_fields(domain.verify(t, c, sandbox=sandbox)) for t, c in zip(tasks, completions)]
  except Exception as e:  # a verifier bug is counted, never raised into training
    return [exception_failure(e)] * len(tasks)


def units(domain: Domain, n: int) -> list[tuple[int, int]]:
  """(offset, count) work units: the whole batch, or one completion each."""
  return [(0, n)] if batches_itself(domain) else [(i, 1) for i in range(n)]
