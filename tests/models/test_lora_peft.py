"""The PEFT round trip (experiments/benchmarks/peft_roundtrip.py): our adapters loaded by
`peft` give our logits and merged weights. A benchmark extra: skipped where peft is not
installed (tests/models/test_lora.py checks the layout and the merge formula without it)."""

import pytest

pytest.importorskip("peft")

from experiments.benchmarks import peft_roundtrip  # noqa: E402


def test_peft_loads_our_adapters_and_gives_our_logits():
  result = peft_roundtrip.main([])
  assert result["logits_max_abs_diff"] < 1e-4, result  # float32, different matmul orders
  assert result["merged_weights_max_abs_diff"] < 1e-6, result
