"""Small contracts of ``extract_trajectory``'s arguments (order, duplicates, empty requests)."""

from __future__ import annotations

import pytest

from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.data.render import render

pytestmark = pytest.mark.unit


def _config() -> ExtractConfig:
    return ExtractConfig(layers=[0], poolings=["last"])


def test_boundaries_keep_their_order_and_duplicates(tiny_sensor, mini_trajectory):
    rows = extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[3, 1, 3])
    assert [r.after_step for r in rows] == [3, 1, 3]
    for r in rows:
        assert r.n_tokens == render(mini_trajectory, r.after_step, tiny_sensor.tokenizer).n_tokens


def test_boundary_out_of_range_is_refused(tiny_sensor, mini_trajectory):
    with pytest.raises(ValueError, match="out of range"):
        extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[mini_trajectory.n_steps + 1])


def test_empty_boundary_list_extracts_nothing(tiny_sensor, mini_trajectory):
    assert extract_trajectory(tiny_sensor, mini_trajectory, "full", _config(), boundaries=[]) == []


@pytest.mark.parametrize("kwargs, match", [
    ({"poolings": ["mean_reasonig"]}, r"^poolings: .*unknown pooling rule 'mean_reasonig'; known: last, "),
    ({"poolings": ["mean_last:0"]}, r"^poolings: .*mean_last:N needs N >= 1"),
    ({"poolings": ["last:3"]}, r"^poolings: .*unknown pooling rule"),
    ({"poolings": []}, r"^poolings: must be a list of values"),
    ({"sites": ["resid"]}, r"^sites: must be .*one of resid_pre, resid_post, attn_out, mlp_out"),
    ({"layers": [-1]}, r"^layers: must be a list of values, each an integer >= 0"),
    ({"layers": [0.5]}, r"^layers: must be a list"),
    ({"layers": "0"}, r"^layers: must be a list"),
    ({"attention_layers": [True]}, r"^attention_layers: must be a list"),
    ({"max_tokens": 0}, r"^max_tokens: must be an integer >= 1"),
    ({"max_tokens": 1.5}, r"^max_tokens: must be an integer >= 1"),
    ({"share_prefix": "no"}, r"^share_prefix: must be true or false"),
])
def test_config_refuses_bad_settings_on_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ExtractConfig(**{"layers": [0], **kwargs})


def test_config_normalises_and_accepts_every_known_rule():
    from interp.extraction.pooling import PARAM_RULES, RULES
    from interp.sensor.hooks import SITES

    config = ExtractConfig(layers=[0, 3], sites=list(SITES), poolings=[*RULES, *(f"{p}:4" for p in PARAM_RULES)])
    assert config.layers == (0, 3) and config.sites == tuple(SITES)  # tuples: a frozen config cannot drift
    assert config.to_json()["layers"] == [0, 3]  # lists, as stored in store.json
    assert ExtractConfig(layers=[0], poolings="last,mean_reasoning").poolings == ("last", "mean_reasoning")
    with pytest.raises(AttributeError):
        config.poolings = ("mean_reasonig",)  # type: ignore[misc]  # frozen: no later edit


def test_config_checked_against_the_model(tiny_sensor, mini_trajectory):
    bad = ExtractConfig(layers=[tiny_sensor.n_layers])
    with pytest.raises(ValueError, match=r"^layers: .* out of range"):
        extract_trajectory(tiny_sensor, mini_trajectory, "full", bad, boundaries=[1])
    linear = sorted(set(range(tiny_sensor.n_layers)) - set(tiny_sensor.full_attention_layers))
    if linear:
        with pytest.raises(ValueError, match=r"^attention_layers: .* linear attention"):
            extract_trajectory(tiny_sensor, mini_trajectory, "full", ExtractConfig(layers=[0], attention_layers=linear[:1]),
                               boundaries=[1])
