"""The sensor layer leaves no process state behind: attention registrations, float64 kernels, prefix K/V.

Also the spec registry (read-only, one module per spec) and the ``Sensor`` protocol.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import transformers.models.qwen3_5.modeling_qwen3_5 as qwen
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import interp.sensor.kernels.deltanet as deltanet
from interp.sensor.forward import Plan, run_plan
from interp.sensor.hooks import attention_implementation
from interp.sensor.kernels import chunk_attention, variants
from interp.sensor.kernels.deltanet import bind_float64_kernels, float64_kernels
from interp.sensor.protocol import ForwardSensor, Sensor

pytestmark = pytest.mark.unit

KERNELS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
NAMES = (chunk_attention.IMPLEMENTATION, variants.IMPLEMENTATION)


def _registered(name: str) -> bool:
    return name in ALL_ATTENTION_FUNCTIONS or name in AttentionInterface._global_mapping


def _kernels_are_transformers_own() -> bool:
    return not any(getattr(getattr(qwen, k), "float64_aware", False) for k in KERNELS)


def _ids(sensor, n: int, seed: int) -> list[int]:
    return torch.randint(0, sensor.hf_model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_importing_the_kernels_registers_nothing():
    assert not any(_registered(name) for name in NAMES)
    assert _kernels_are_transformers_own()


def test_run_plan_leaves_no_attention_registered(tiny_sensor):
    model = tiny_sensor.hf_model
    before = model.config._attn_implementation
    run_plan(tiny_sensor, _ids(tiny_sensor, 30, 1), Plan(logprobs=[29], cuts=[10, 20]))
    assert not _registered(chunk_attention.IMPLEMENTATION)
    assert model.config._attn_implementation == before == "sdpa"


def test_run_variants_leaves_no_attention_and_no_prefix_held(tiny_sensor):
    model = tiny_sensor.hf_model
    ids = _ids(tiny_sensor, 24, 2)
    snap = run_plan(tiny_sensor, ids[:-1], Plan(snapshots=[23])).snapshots[23]
    layer = tiny_sensor.full_attention_layers[0]
    keys = weakref.ref(snap.cache.layers[layer].keys)
    d = tiny_sensor.d_model
    lp = variants.run_variants(tiny_sensor, snap.cache, 23, ids[-1:],
                               [{}, {f"blocks.{layer}.hook_resid_pre": torch.zeros(1, d)}])
    assert lp.shape == (2, model.config.vocab_size)
    assert not _registered(variants.IMPLEMENTATION)
    assert model.config._attn_implementation == "sdpa"
    assert not hasattr(variants, "_PREFIX")
    del snap
    gc.collect()
    assert keys() is None, "something still holds the shared prefix keys after run_variants"


def test_attention_implementation_restores_on_error_and_keeps_a_previous_entry(tiny_sensor):
    model = tiny_sensor.hf_model
    name = "interp_test_scope"

    def outer(*args, **kwargs):
        raise AssertionError("not called")

    def inner(*args, **kwargs):
        raise AssertionError("not called")

    with attention_implementation(model, name, outer):
        assert ALL_ATTENTION_FUNCTIONS[name] is outer and model.config._attn_implementation == name
        with pytest.raises(RuntimeError, match="boom"), attention_implementation(model, name, inner):
            assert ALL_ATTENTION_FUNCTIONS[name] is inner
            raise RuntimeError("boom")
        assert ALL_ATTENTION_FUNCTIONS[name] is outer and model.config._attn_implementation == name
    assert not _registered(name)
    assert model.config._attn_implementation == "sdpa"


def test_float64_kernels_patch_and_restore_even_on_error():
    originals = {k: getattr(qwen, k) for k in KERNELS}
    with pytest.raises(RuntimeError, match="boom"), float64_kernels():
        assert all(getattr(qwen, k).float64_aware for k in KERNELS)
        raise RuntimeError("boom")
    assert {k: getattr(qwen, k) for k in KERNELS} == originals


def test_fp64_model_scopes_its_kernels_to_its_own_forwards(tiny_sensor_fp64, tiny_sensor, monkeypatch):
    """After loading (and between forwards) transformers' kernels are its own; the fp64 model still runs fp64."""
    assert _kernels_are_transformers_own()
    calls = []
    real = deltanet.gated_delta_rule_fp64
    monkeypatch.setattr(deltanet, "gated_delta_rule_fp64", lambda *a, **k: calls.append(1) or real(*a, **k))
    n_linear = len(tiny_sensor_fp64.linear_attention_layers)
    ids = torch.tensor([_ids(tiny_sensor_fp64, 12, 3)])
    with torch.inference_mode():
        tiny_sensor_fp64.hf_model(input_ids=ids)
        assert len(calls) == n_linear
        tiny_sensor_fp64.bridge(ids)  # TransformerLens reimplements the layer: instance-bound kernel
        assert len(calls) == 2 * n_linear
        seen = []
        handle = tiny_sensor.hf_model.model.layers[0].linear_attn.register_forward_pre_hook(
            lambda m, a: seen.append(getattr(qwen.torch_chunk_gated_delta_rule, "float64_aware", False)))
        try:
            tiny_sensor.hf_model(input_ids=ids)  # another model in the process: untouched
        finally:
            handle.remove()
    assert seen == [False] and len(calls) == 2 * n_linear
    assert _kernels_are_transformers_own()


def test_bind_float64_kernels_handles_unbind_everything():
    from transformers import Qwen3_5ForCausalLM

    from interp.sensor.specs.tiny_qwen import tiny_config

    config = tiny_config(vocab_size=32)
    config.num_hidden_layers, config.layer_types = 2, ["linear_attention", "full_attention"]
    model = Qwen3_5ForCausalLM(config).to(torch.float64).eval()
    handles = bind_float64_kernels(model)
    layer = model.model.layers[0].linear_attn
    assert len(handles) == 3 and "chunk_gated_delta_rule" in vars(layer)
    assert layer._forward_pre_hooks and layer._forward_hooks
    for h in handles:
        h.remove()
    assert "chunk_gated_delta_rule" not in vars(layer)
    assert not layer._forward_pre_hooks and not layer._forward_hooks
    assert _kernels_are_transformers_own()


def test_spec_registry_is_read_only_and_one_module_per_spec():
    from interp.sensor import models, specs
    from interp.sensor.specs import qwen35_9b, smollm2, tiny_qwen

    assert models.SPECS is specs.SPECS
    assert list(specs.SPECS) == ["smollm2-135m", "tiny-qwen3.5", "qwen3.5-9b"]
    assert [specs.SPECS[n] for n in specs.SPECS] == [smollm2.SPEC, tiny_qwen.SPEC, qwen35_9b.SPEC]
    assert all(name == spec.name for name, spec in specs.SPECS.items())
    assert qwen35_9b.SPEC.hub_id == "Qwen/Qwen3.5-9B" and qwen35_9b.SPEC.fetch is None
    assert tiny_qwen.SPEC.local_build and smollm2.SPEC.hub_id is None
    with pytest.raises(TypeError):
        specs.SPECS["other"] = smollm2.SPEC  # type: ignore[index]


def test_loaded_sensor_implements_the_protocol(tiny_sensor):
    assert isinstance(tiny_sensor, Sensor) and isinstance(tiny_sensor, ForwardSensor)
    assert not hasattr(tiny_sensor, "meta")
    assert tiny_sensor.describe()["spec"] == "tiny-qwen3.5"
    assert tiny_sensor.full_attention_layers == [3, 7]
    assert tiny_sensor.linear_attention_layers == [0, 1, 2, 4, 5, 6]
