"""``load_model`` reads weights straight onto the device and picks the dtype per device; the kernels report names what runs.

The device test loads onto ``meta`` (a real second device on a CPU-only
machine): the HF model must come out of ``from_pretrained`` already there
(no host copy moved afterwards), and the whole sensor, bridge included, stays
there. The kernel report is checked against wrappers built with transformers'
own ``use_kernel_func_from_hub_with_fallback`` over a stand-in package.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
import transformers
from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

from interp.sensor.kernels import binding
from interp.sensor.models import load_model, resolve_dtype

pytestmark = pytest.mark.unit

META = torch.device("meta")


def test_load_model_reads_weights_onto_the_device(monkeypatch):
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__
    loaded = []

    def spy(cls, *args, **kwargs):
        model = real(cls, *args, **kwargs)
        loaded.append((kwargs.get("device_map"), {t.device for t in [*model.parameters(), *model.buffers()]}))
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    sensor = load_model("tiny-qwen3.5", device="meta")
    assert loaded == [(META, {META})]  # on the device as from_pretrained returns it
    assert {t.device for t in [*sensor.hf_model.parameters(), *sensor.bridge.parameters()]} == {META}
    assert sensor.device == META and sensor.dtype == torch.float32


def test_a_model_whose_forward_drops_the_cache_argument_is_refused_at_load(monkeypatch):
    """transformers < 5.24 names the cache ``past_key_values`` and drops an unknown ``cache`` into ``**kwargs``;
    a model like that (here: the tiny model's forward behind such a signature) is refused when loaded."""
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def old_signature(cls, *args, **kwargs):
        model = real(cls, *args, **kwargs)
        forward = model.base_model.forward

        def legacy(input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return forward(input_ids=input_ids, cache=past_key_values, use_cache=use_cache, **kwargs)

        model.base_model.forward = legacy
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(old_signature))
    with pytest.raises(RuntimeError, match=r"takes no 'cache' argument .*transformers >= 5\.24"):
        load_model("tiny-qwen3.5", device="meta")


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "cpu", "meta"])
def test_auto_dtype_without_an_analysis_is_float32(device):
    """The sensor layer knows no analysis: ``auto`` with no precision given is float32 on every device (correct for
    every analysis; bfloat16 only where an analysis's config allows it), and an explicit dtype wins."""
    assert resolve_dtype("auto", device) == torch.float32
    assert resolve_dtype("fp32", device) == torch.float32
    assert resolve_dtype("bf16", device) == torch.bfloat16


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "cpu", "meta"])
def test_auto_dtype_is_chosen_per_analysis_on_cuda(device):
    """``--dtype auto`` on CUDA follows each analysis config's precision (float32 where small distribution
    differences are the result, bfloat16 for extraction and generation); off CUDA it is float32 for every analysis;
    an explicit dtype is obeyed. Strings only: no GPU is needed to resolve the table."""
    from interp.pipelines.configs import CONFIGS, INPUTS, model_dtype
    from interp.reporting.analyses import ANALYSES

    cuda = device.startswith("cuda")
    # tokens: its drsr_gate policy runs the gate as DRSR; anchors: KLs of small attention suppressions
    precise = ("kl_repair", "harm", "drsr", "iclr", "tokens", "anchors")
    assert set(CONFIGS) - set(INPUTS) <= {a.name for a in ANALYSES}  # the registry's names (INPUTS: the store, labels)
    assert {name for name, cls in CONFIGS.items() if cls.precision == "float32"} == set(precise)
    assert {name for name, cls in CONFIGS.items() if cls.precision == "bfloat16"} == {"extract", "interventions"}
    for analysis, cls in CONFIGS.items():
        if cls.precision is None:  # runs no model
            continue
        want = torch.float32 if not cuda or analysis in precise else torch.bfloat16
        assert resolve_dtype("auto", device, cls.precision) == want
        assert model_dtype("auto", device, cls) == str(want).removeprefix("torch.")
        assert resolve_dtype(want, device, cls.precision) == want
        for explicit, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
            assert resolve_dtype(explicit, device, cls.precision) == dt and model_dtype(explicit, device, cls) == explicit
    with pytest.raises(ValueError, match="unknown dtype"):
        model_dtype("fp8", device, CONFIGS["harm"])


def _stand_in_modeling_module(monkeypatch, with_fla: bool) -> types.ModuleType:
    """A modeling module whose kernels are wrapped like transformers' Qwen3.5 ones; ``fla`` importable or not."""
    def fast(query, key, value, g, beta, **kwargs):
        return "fla"

    if with_fla:
        for name in ("fla", "fla.ops", "fla.ops.gated_delta_rule"):
            module = types.ModuleType(name)
            monkeypatch.setitem(sys.modules, name, module)
        sys.modules["fla"].ops = sys.modules["fla.ops"]
        sys.modules["fla.ops"].gated_delta_rule = sys.modules["fla.ops.gated_delta_rule"]
        fast.__module__ = "fla.ops.gated_delta_rule.chunk"
        sys.modules["fla.ops.gated_delta_rule"].chunk_gated_delta_rule = fast
    else:
        monkeypatch.setitem(sys.modules, "fla", None)  # import fails: the torch fallback is bound

    def torch_chunk_gated_delta_rule(query, key, value, g, beta, **kwargs):
        return "torch"
    torch_chunk_gated_delta_rule.__module__ = "transformers.models.stand_in"

    owner = types.ModuleType("stand_in_modeling")
    owner.torch_chunk_gated_delta_rule = use_kernel_func_from_hub_with_fallback("chunk_gated_delta_rule", "fla")(
        torch_chunk_gated_delta_rule)
    return owner


@pytest.mark.parametrize("with_fla", [True, False])
def test_module_kernels_names_what_the_wrapper_calls(monkeypatch, with_fla):
    owner = _stand_in_modeling_module(monkeypatch, with_fla)
    called = owner.torch_chunk_gated_delta_rule(None, None, None, None, None)  # what actually runs
    assert called == ("fla" if with_fla else "torch")
    assert binding.module_kernels(owner) == {"torch_chunk_gated_delta_rule": called}
    # with a CPU tensor: transformers >= 5.25 calls its torch code where fla cannot run, older ones call fla
    on_cpu = owner.torch_chunk_gated_delta_rule(torch.zeros(1), None, None, None, None)
    assert binding.module_kernels(owner, "cpu") == {"torch_chunk_gated_delta_rule": on_cpu}


def test_loaded_models_report_their_kernels(tiny_sensor, tiny_sensor_fp64):
    # this environment has neither fla nor causal-conv1d: transformers' torch code runs
    assert tiny_sensor.kernels == dict.fromkeys(binding.KERNELS, "torch")
    assert binding.config_kernels(tiny_sensor.hf_model.config) == tiny_sensor.kernels
    assert tiny_sensor_fp64.kernels == {"torch_chunk_gated_delta_rule": "interp-fp64",
                                        "torch_recurrent_gated_delta_rule": "interp-fp64",
                                        "causal_conv1d_fn": "torch", "causal_conv1d_update": "torch"}
    assert binding.kernels_line(tiny_sensor.kernels) == "Gated-DeltaNet: torch; conv: torch"


def test_kernels_line():
    assert binding.kernels_line({}) == "none (no Gated-DeltaNet layers)"
    mixed = {"torch_chunk_gated_delta_rule": "fla", "torch_recurrent_gated_delta_rule": "fla",
             "causal_conv1d_fn": "causal-conv1d", "causal_conv1d_update": "torch"}
    assert binding.kernels_line(mixed) == ("Gated-DeltaNet: fla; conv: causal_conv1d_fn=causal-conv1d, "
                                           "causal_conv1d_update=torch")
