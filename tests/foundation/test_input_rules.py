"""The input rules behind the CLI's one-line refusals: each one here, without the CLI (tests/e2e/test_bad_input.py
drives them through every command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from interp.data.trajectory import TrajectoryError, load_trajectories, validate_file
from interp.extraction.batch import layer_numbers, parse_boundaries, parse_layers
from interp.io import check_output_dir, read_json
from interp.sensor.models import _revision, check_device, weights_checksum
from patching.harm import check_boundaries

pytestmark = pytest.mark.unit

MINI = Path(__file__).resolve().parents[1] / "data" / "mini.jsonl"


def _with_reasoning(tmp_path: Path, text: str) -> Path:
    raw = json.loads(MINI.read_text().splitlines()[0])
    raw["steps"][2]["reasoning"] = text
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    return path


@pytest.mark.parametrize("token", ["<|im_end|>", "<|im_start|>", "</think>", "<think>", "<|endoftext|>",
                                   "</tool_call>", "<tool_response>"])
def test_control_tokens_are_refused_unless_allowed(tmp_path, token):
    path = _with_reasoning(tmp_path, f"Plan the fix. {token} Then run the tests.")
    with pytest.raises(TrajectoryError, match=rf"t.jsonl:1: steps\[2\].reasoning: control token\(s\) {token}"):
        load_trajectories(path)
    assert validate_file(path).problems and not validate_file(path, allow_control_tokens=True).problems
    assert token in load_trajectories(path, allow_control_tokens=True)[0].steps[2].reasoning  # kept as written


@pytest.mark.parametrize("text", ["a < b and c | d > e", "<|", "|>", "<thinking>", "x<|a b|>y"])
def test_text_that_only_looks_like_a_control_token_passes(tmp_path, text):
    assert not validate_file(_with_reasoning(tmp_path, text)).problems


@pytest.mark.parametrize("body", ["", "\n\n  \n"])
def test_an_empty_file_is_a_problem(tmp_path, body):
    path = tmp_path / "e.jsonl"
    path.write_text(body)
    assert validate_file(path).problems == [f"no trajectories in {path}"]
    with pytest.raises(TrajectoryError, match="^no trajectories in "):
        load_trajectories(path)


def test_deep_nesting_and_folders_are_one_line_problems(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert validate_file(path).problems == [f"{path}:1: (line): JSON nested too deeply to read"]
    assert validate_file(tmp_path).problems == [f"{tmp_path}: is a directory, not a trajectory file (JSON Lines)"]
    (tmp_path / "x.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match="x.json: JSON nested too deeply"):
        read_json(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": ')
    with pytest.raises(ValueError, match="y.json: invalid JSON at line 1"):
        read_json(tmp_path / "y.json")


@pytest.mark.parametrize("spec, message", [("3-1", "empty range '3-1'"), ("x", "bad layer spec 'x'"),
                                           ("1,,2", "bad layer spec ''"), ("1based:5-2", "empty range")])
def test_layer_specs_are_checked_before_the_model_is_known(spec, message):
    with pytest.raises(ValueError, match=f"--layers '{spec}': {message}"):
        layer_numbers(spec, "--layers")
    with pytest.raises(ValueError, match="--layers"):
        parse_layers(spec, 8, [3, 7], "--layers")


def test_boundaries_are_parsed_in_range_and_deduplicated(mini_trajectory):
    assert parse_boundaries("3,1,3", [mini_trajectory]) == [1, 3]
    for spec, message in (("two", "'two' is not an integer"), ("0", "0 out of range 1..4"), ("9", "9 out of range"),
                          (",", "'' is not an integer")):
        with pytest.raises(ValueError, match=f"--boundaries '{spec}': {message}"):
            parse_boundaries(spec, [mini_trajectory])
    ok = f"{mini_trajectory.task_id}@2"
    assert check_boundaries([ok, ok], [mini_trajectory]) == [ok]
    for key, message in (("web-002", "expected task_id@b"), ("web-002@1", "no trajectory 'web-002'"),
                         (f"{mini_trajectory.task_id}@4", "b must be in 1..3")):
        with pytest.raises(ValueError, match=message):
            check_boundaries([key], [mini_trajectory])


@pytest.mark.parametrize("device, message", [("tpu", "not a torch device"), ("cuda:99", "CUDA|99"),
                                             ("xla", "unsupported device type")])
def test_devices_the_machine_lacks_are_refused(device, message):
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 GPUs")
    with pytest.raises(ValueError, match=f"--device {device}: .*({message})"):
        check_device(device)
    assert check_device("cpu") == torch.device("cpu")


def test_output_folders_that_are_files_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    check_output_dir(tmp_path / "new" / "deeper", "--out")  # creatable: fine, and nothing is created
    assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match="--out .*/f: is a file"):
        check_output_dir(tmp_path / "f", "--out")
    with pytest.raises(ValueError, match="--out .*/f/sub: .*/f is a file"):
        check_output_dir(tmp_path / "f" / "sub", "--out")


def test_revision_hashes_weight_content_not_size(tmp_path, monkeypatch):
    """Two checkpoints with weights of the same shape get different revisions; the checksum is cached by mtime."""
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    revisions = []
    for k, value in enumerate((0.0, 1.0)):
        ckpt = tmp_path / f"ckpt{k}"
        ckpt.mkdir()
        (ckpt / "config.json").write_text('{"hidden_size": 4}')
        save_file({"w": torch.full((4, 4), value)}, ckpt / "model.safetensors")
        revisions.append(_revision(ckpt))
    assert revisions[0] != revisions[1]
    assert (tmp_path / "ckpt0" / "model.safetensors").stat().st_size == (tmp_path / "ckpt1" / "model.safetensors").stat().st_size
    cached = json.loads((tmp_path / "cache" / "checksums.json").read_text())
    assert len(cached) == 2
    path = tmp_path / "ckpt0" / "model.safetensors"
    key = next(k for k in cached if k.startswith(str(path.resolve())))
    cached[key] = "f" * 64  # a recorded checksum is trusted while size and mtime match
    (tmp_path / "cache" / "checksums.json").write_text(json.dumps(cached))
    assert weights_checksum(path) == "f" * 64
