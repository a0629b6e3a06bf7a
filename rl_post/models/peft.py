"""LoRA adapters in the PEFT layout: `adapter_config.json` + `adapter_model.safetensors`.

PEFT (Hugging Face's adapter library) names a Llama/Qwen2 adapter tensor
`base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight` and
stores torch Linear layouts: lora_A is [r, in] and lora_B is [out, r], so
its merged weight is W_hf + (lora_alpha / r) lora_B @ lora_A. Ours are
A_KxR [L, *in, r] and B_RxN [L, r, *out] (`rl_post.models.lora`), with the
in/out dims flattened in the same order as `hf_mapping`'s weights (q: heads
then head_dim; o's input likewise), so one is the other transposed.
"""

import json
import os

import jax
import numpy as np

from rl_post.models import lora as lora_lib
from rl_post.models import safetensors_io
from rl_post.models.config import ModelConfig

ADAPTER_DIR = "adapter"  # an SFT export's sub-folder holding its adapters
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_HF_TO_OURS = {hf: ours for ours, (_, _, hf) in lora_lib.TARGETS.items()}


def tensor_name(layer: int, target: str, which: str) -> str:
  """PEFT's name of one layer's lora_A / lora_B ("A" or "B") of our `target`."""
  _, module, hf = lora_lib.TARGETS[target]
  return f"base_model.model.model.layers.{layer}.{module}.{hf}.lora_{which}.weight"


def adapter_tensors(config: ModelConfig, adapters: dict) -> dict[str, np.ndarray]:
  """{PEFT name: array} of every layer's lora_A [r, in] and lora_B [out, r] (float32)."""
  out = {}
  for targets in adapters.values():
    for target, adapter in targets.items():
      a = np.asarray(jax.device_get(adapter["A_KxR"]), np.float32)
      b = np.asarray(jax.device_get(adapter["B_RxN"]), np.float32)
      r = a.shape[-1]
      for i in range(config.num_layers):
        out[tensor_name(i, target, "A")] = np.ascontiguousarray(a[i].reshape(-1, r).T)
        out[tensor_name(i, target, "B")] = np.ascontiguousarray(b[i].reshape(r, -1).T)
  return out


def adapter_config(lora: lora_lib.LoraConfig, base_model: str = "") -> dict:
  """PEFT's `LoraConfig` fields for these adapters (plain LoRA, no bias, no rsLoRA)."""
  return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
          "r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
          "target_modules": sorted(lora_lib.TARGETS[t][2] for t in lora.targets),
          "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
          "modules_to_save": None, "layers_to_transform": None, "inference_mode": True,
          "init_lora_weights": True}


def save_adapter(directory: str, config: ModelConfig, adapters: dict,
                 lora: lora_lib.LoraConfig, *, base_model: str = "") -> str:
  """Writes the adapters (not the base) as PEFT loads them; returns `directory`.

  `base_model`: the base's HF name or path, recorded for `PeftModel.from_pretrained`.
  """
  os.makedirs(directory, exist_ok=True)
  safetensors_io.write_file(os.path.join(directory, WEIGHTS_FILE),
                            adapter_tensors(config, adapters))
  with open(os.path.join(directory, CONFIG_FILE), "w") as f:
    json.dump(adapter_config(lora, base_model), f, indent=2)
  return directory


def load_adapter(directory: str, config: ModelConfig) -> tuple[dict, lora_lib.LoraConfig]:
  """(adapters, LoraConfig) from a PEFT adapter folder written for a model of `config`.

  Raises:
    ValueError: not a plain LoRA adapter of known modules, or tensors missing
      or of the wrong shape for `config`.
  """
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    values = json.load(f)
  if values.get("peft_type") != "LORA" or values.get("use_rslora") or values.get("use_dora"):
    raise ValueError(f"{directory}: only plain LoRA adapters load (peft_type LORA, no rsLoRA "
                     f"or DoRA), got {values.get('peft_type')!r}")
  modules = values.get("target_modules") or []
  unknown = sorted(set(modules) - set(_HF_TO_OURS))
  if unknown or isinstance(modules, str):
    raise ValueError(f"{directory}: target_modules {modules!r} name modules this model has "
                     f"no adapters for; known: {sorted(_HF_TO_OURS)}")
  lora = lora_lib.LoraConfig(rank=int(values["r"]), alpha=float(values["lora_alpha"]),
                             targets=tuple(t for t in lora_lib.TARGETS
                                           if lora_lib.TARGETS[t][2] in modules))
  expected = jax.tree.map(lambda x: x.shape, lora_lib.abstract_adapters(config, lora))
  stored = safetensors_io.SafetensorsDir(directory)
  adapters = {}
  for module, targets in expected.items():
    for target, shapes in targets.items():
      leaves = {}
      for key, which in (("A_KxR", "A"), ("B_RxN", "B")):
        per_layer = []
        for i in range(config.num_layers):
          name = tensor_name(i, target, which)
          if name not in stored:
            raise ValueError(f"{directory}: tensor {name!r} is missing")
          want = shapes[key][1:]  # ours: [*in, r] / [r, *out]
          flat = int(np.prod(want)) // lora.rank
          hf_shape = (lora.rank, flat) if which == "A" else (flat, lora.rank)
          if tuple(stored.shape(name)) != hf_shape:
            raise ValueError(f"{directory}: {name} has shape {tuple(stored.shape(name))}, "
                             f"expected {hf_shape} (this model's {target} at rank {lora.rank})")
          per_layer.append(np.asarray(stored.get(name), np.float32).T.reshape(want))
        leaves[key] = np.stack(per_layer).astype(jax.numpy.dtype(config.param_dtype))
      adapters.setdefault(module, {})[target] = leaves
  return adapters, lora
