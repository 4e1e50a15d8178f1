"""The activation store: interrupted runs resume to the identical store, shards merge to it, other
settings are refused, and ``load_features`` rows line up with the manifest.

Reference: one uninterrupted in-process ``extract_to_store`` run (tiny-qwen3.5,
the mini trajectory + two short demo trajectories, 2 conditions, boundaries
1-2, a ``max_tokens`` that skips one boundary). In-process runs are compared
bit for bit. CLI runs (``interp extract`` / ``interp merge`` in subprocesses)
use ``OMP_NUM_THREADS=1`` like the test process, so they are compared bit for
bit too.
"""

from __future__ import annotations

import dataclasses

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors import safe_open

import interp.extraction.store as store_mod
from interp.io import atomic_path
from interp.extraction.batch import extract_to_store, trajectories_sha256
from interp.extraction.extract import ExtractConfig, extract_trajectory
from interp.extraction.store import Store, StoreMismatch
from interp.data.trajectory import load_trajectories

from ._reference import DEMO, MINI, raw_lines, write_jsonl

pytestmark = pytest.mark.e2e

CONDITIONS = ["full", "delete_latest_reasoning"]
BOUNDARIES = [1, 2]
MAX_TOKENS = 2300  # skips web-002 @2 under "full" (2342 tokens with the tiny tokenizer)
CLI_ARGS = ["--model", "tiny-qwen3.5", "--layers", "0,3,7", "--sites", "resid_pre", "--pooling", "last,mean_reasoning",
            "--conditions", ",".join(CONDITIONS), "--attention", "full_attention", "--boundaries", "1,2",
            "--max-tokens", str(MAX_TOKENS)]


def _config() -> ExtractConfig:
    return ExtractConfig(layers=[0, 3, 7], sites=["resid_pre"], poolings=["last", "mean_reasoning"],
                         attention_layers=[3, 7], max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def traj_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trajs") / "trajectories.jsonl"
    return write_jsonl(path, raw_lines(MINI, ["mini-code-1"]) + raw_lines(DEMO, ["web-002", "web-003"]))


@pytest.fixture(scope="module")
def trajs(traj_file):
    return load_trajectories(traj_file)


def _extract(sensor, trajs, root: Path, config: ExtractConfig | None = None, shard=(0, 1)):
    return extract_to_store(sensor, trajs, CONDITIONS, config or _config(), root, shard=shard,
                            boundaries=BOUNDARIES, progress=False)


@pytest.fixture(scope="module")
def ref_store(tiny_sensor, trajs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ref") / "store"
    counts = _extract(tiny_sensor, trajs, root)
    assert counts["units"] == 6 and counts["skipped_long"] >= 1 and counts["samples"] >= 10, counts
    return root


def _temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


def _assert_same_store(got: Path, ref: Path, input_file: Path | None = None) -> None:
    """Same settings, same unit files, same manifest rows, every tensor bit-identical; no temp files.

    ``input_file``: ``got`` was made from this file by the CLI; its run records the same input hash as the
    in-process reference (the trajectories' JSON lines), so a CLI resume of an in-process store is accepted."""
    assert _temp_files(got) == [], _temp_files(got)
    meta, ref_meta = (json.loads((root / "store.json").read_text()) for root in (got, ref))
    if input_file is not None:
        assert meta["run"]["input_sha256"] == trajectories_sha256(load_trajectories(input_file))
    assert meta == ref_meta
    names = sorted(p.name for p in (ref / "units").iterdir())
    assert sorted(p.name for p in (got / "units").iterdir()) == names
    for name in names:
        if name.endswith(".json"):
            got_rows, ref_rows = (json.loads((root / "units" / name).read_text()) for root in (got, ref))
            assert got_rows == ref_rows, name
            continue
        with safe_open(got / "units" / name, "pt") as a, safe_open(ref / "units" / name, "pt") as b:
            assert a.metadata() == b.metadata()
            assert sorted(a.keys()) == sorted(b.keys()), name
            for key in b.keys():
                assert torch.equal(a.get_tensor(key), b.get_tensor(key)), f"{name}: {key}"
    pd.testing.assert_frame_equal(pd.read_parquet(got / "manifest.parquet"), pd.read_parquet(ref / "manifest.parquet"))
    assert (got / "manifest.csv").read_bytes() == (ref / "manifest.csv").read_bytes()


def _done_units(root: Path) -> int:
    return len(list((root / "units").glob("*.json"))) if (root / "units").exists() else 0


def test_reference_store_layout(ref_store, trajs):
    frame = pd.read_parquet(ref_store / "manifest.parquet")
    assert len(frame) == len(trajs) * len(CONDITIONS) * len(BOUNDARIES)
    skipped = frame[frame["status"] == "skipped"]
    assert len(skipped) >= 1 and (skipped["row"] == -1).all()
    assert skipped["reason"].str.contains(str(MAX_TOKENS)).all()
    assert (frame.loc[frame["status"] == "ok", "row"] >= 0).all()
    ok_forward = frame.loc[frame["status"] == "ok", "forward"]
    assert all(f == "shared" or f.startswith("suffix@") for f in ok_forward), set(ok_forward)
    assert (frame.loc[frame["condition"] == "full", "forward"].isin(["shared", ""])).all()


def test_resume_after_interrupt_mid_tensor_write(tiny_sensor, trajs, ref_store, tmp_path, monkeypatch):
    """Ctrl-C while the 3rd unit's tensors are being written: 2 units done, nothing half-written; resume = reference."""
    root = tmp_path / "store"
    real_write = store_mod.atomic_write_bytes
    calls = []

    def interrupted_write(path, data):
        calls.append(path)
        if len(calls) == 3:  # the temp file holds half a unit when the signal lands
            with atomic_path(path) as tmp:
                tmp.write_bytes(data[: len(data) // 2])
                raise KeyboardInterrupt
        return real_write(path, data)

    monkeypatch.setattr(store_mod, "atomic_write_bytes", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        _extract(tiny_sensor, trajs, root)
    assert _done_units(root) == 2
    assert len(list((root / "units").glob("*.safetensors"))) == 2
    assert _temp_files(root) == []
    monkeypatch.setattr(store_mod, "atomic_write_bytes", real_write)
    counts = _extract(tiny_sensor, trajs, root)
    assert counts["skipped_done"] == 2 and counts["units"] == 6
    _assert_same_store(root, ref_store)


def test_resume_after_interrupt_before_unit_rows(tiny_sensor, trajs, ref_store, tmp_path, monkeypatch):
    """Interrupted after a unit's tensors were renamed in but before its rows: the unit is not done, its tensors are
    removed (never tensors without rows, e.g. on a full disk), and it is redone."""
    root = tmp_path / "store"
    real_json = store_mod.atomic_write_json
    unit_writes = []

    def interrupted_json(path, obj):
        if Path(path).parent.name == "units":
            unit_writes.append(path)
            if len(unit_writes) == 4:
                raise KeyboardInterrupt
        return real_json(path, obj)

    monkeypatch.setattr(store_mod, "atomic_write_json", interrupted_json)
    with pytest.raises(KeyboardInterrupt):
        _extract(tiny_sensor, trajs, root)
    assert _done_units(root) == 3
    assert len(list((root / "units").glob("*.safetensors"))) == 3  # the 4th unit's tensors went with its rows
    monkeypatch.setattr(store_mod, "atomic_write_json", real_json)
    counts = _extract(tiny_sensor, trajs, root)
    assert counts["skipped_done"] == 3
    _assert_same_store(root, ref_store)


def test_shards_merge_in_process(tiny_sensor, trajs, ref_store, tmp_path):
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    counts = [_extract(tiny_sensor, trajs, shards[i], shard=(i, 2)) for i in range(2)]
    assert [c["units"] for c in counts] == [3, 3]
    names = [{p.stem for p in (s / "units").glob("*.json")} for s in shards]
    assert names[0].isdisjoint(names[1]) and len(names[0] | names[1]) == 6
    store_mod.merge_stores(tmp_path / "merged", shards)
    _assert_same_store(tmp_path / "merged", ref_store)


@pytest.mark.slow  # loads real SmolLM2 weights
def test_other_settings_refused(tiny_sensor, smol_sensor, trajs, ref_store):
    before = {p.name: p.stat().st_mtime_ns for p in ref_store.rglob("*")}
    other_layers = dataclasses.replace(_config(), layers=[0, 3])
    with pytest.raises(StoreMismatch, match=r"layers: store has \[0, 3, 7\], run asks \[0, 3\]"):
        _extract(tiny_sensor, trajs, ref_store, config=other_layers)
    with pytest.raises(StoreMismatch, match=r"model: store has 'tiny-qwen3.5', run asks 'smollm2-135m'"):
        _extract(smol_sensor, trajs, ref_store)
    assert {p.name: p.stat().st_mtime_ns for p in ref_store.rglob("*")} == before, "a refused run touched the store"


def test_load_features_rows_align_with_manifest(tiny_sensor, trajs, ref_store):
    store = Store(ref_store)
    frame, X = store.load_features()
    assert set(X) == {(layer, pooling) for layer in (0, 3, 7) for pooling in ("last", "mean_reasoning")}
    assert (frame["status"] == "ok").all()
    assert all(x.shape == (len(frame), tiny_sensor.d_model) and x.dtype == "float32" for x in X.values())
    by_id = {t.task_id: t for t in trajs}
    direct = {}
    for i, row in frame.iterrows():
        key = (row["task_id"], row["condition"])
        if key not in direct:
            rows = extract_trajectory(tiny_sensor, by_id[key[0]], key[1], _config(), BOUNDARIES)
            direct[key] = {r.after_step: r for r in rows}
        bf = direct[key][int(row["after_step"])]
        assert row["sample_id"] == f"{key[0]}@{row['after_step']}:{key[1]}"
        assert bf.status == "ok" and row["n_tokens"] == bf.n_tokens and row["forward"] == bf.forward
        assert row["pool_count.mean_reasoning"] == bf.pool_counts["mean_reasoning"]
        for (layer, pooling), matrix in X.items():
            assert torch.equal(torch.from_numpy(matrix[i]), bf.features[f"resid_pre.{layer}.{pooling}"]), (i, layer)
        with safe_open(ref_store / "units" / f"{row['unit']}.safetensors", "pt") as f:
            per_kind = f.get_tensor("attn.7.per_kind")[int(row["row"])]
            per_seg = f.get_tensor(f"attn.7.b{row['after_step']}.per_segment")
        assert torch.equal(per_kind, bf.attention[7]["per_kind"])
        assert torch.equal(per_seg, bf.attention[7]["per_segment"])
    only_full, X_full = store.load_features(condition="full")
    assert set(only_full["condition"]) == {"full"} and len(only_full) == X_full[(0, "last")].shape[0]
    # Sensitivity: neighbouring rows are different samples.
    assert not torch.equal(torch.from_numpy(X[(7, "last")][0]), torch.from_numpy(X[(7, "last")][1]))


def test_resume_with_other_boundaries_is_refused_or_completed(tiny_sensor, trajs, tmp_path):
    root = tmp_path / "store"
    mini = [t for t in trajs if t.task_id == "mini-code-1"]
    extract_to_store(tiny_sensor, mini, ["full"], _config(), root, boundaries=[1, 2], progress=False)
    try:
        extract_to_store(tiny_sensor, mini, ["full"], _config(), root, boundaries=[1, 2, 3], progress=False)
    except StoreMismatch as exc:
        assert "boundaries" in str(exc)
        return
    assert 3 in set(Store(root).manifest()["after_step"]), "boundary 3 was asked for but silently not extracted"


def test_load_features_of_skipped_rows_is_not_another_samples_vector(ref_store):
    store = Store(ref_store)
    try:
        skipped, X_skipped = store.load_features(status="skipped")
    except ValueError:
        return  # refusing to give features for skipped rows is a fix
    assert len(skipped) >= 1
    _, X_ok = store.load_features()
    for i in range(len(skipped)):
        if X_skipped.get((7, "last")) is None or X_skipped[(7, "last")].shape[0] <= i:
            continue
        vec = X_skipped[(7, "last")][i]
        assert not any((vec == other).all() for other in X_ok[(7, "last")]), (
            f"skipped row {skipped.loc[i, 'sample_id']} got an ok sample's features")


def test_store_files_respect_the_umask(ref_store):
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    modes = {p.name: p.stat().st_mode & 0o777 for p in ref_store.rglob("*") if p.is_file()}
    assert all(mode == expected for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


# ------------------------------------------------------------------------------------------------ the CLI


def _cli_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}


def _interp(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "interp", *args], capture_output=True, text=True, env=_cli_env(),
                          timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_cli_interrupt_resume_and_refusal(traj_file, ref_store, tmp_path):
    """``interp extract`` stopped with SIGINT after 2 units, then re-run: identical to the reference store."""
    root = tmp_path / "store"
    cmd = [sys.executable, "-m", "interp", "extract", "--trajectories", str(traj_file), "--store", str(root), *CLI_ARGS]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cli_env())
    deadline = time.monotonic() + 300
    while _done_units(root) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        # Too fast to catch on this machine: leave the state a kill after 2 units leaves (a unit
        # counts as done only once its JSON exists), so the resume below is still exercised.
        for path in sorted((root / "units").glob("*.json"))[2:]:
            path.unlink()
    assert 2 <= _done_units(root) < 6, _done_units(root)
    assert _temp_files(root) == [], _temp_files(root)
    _interp("extract", "--trajectories", str(traj_file), "--store", str(root), *CLI_ARGS)
    _assert_same_store(root, ref_store, traj_file)
    # A run with other layers into the same store is refused, naming the setting, and changes nothing.
    before = {p.name: p.stat().st_mtime_ns for p in root.rglob("*")}
    other = [a if a != "0,3,7" else "0,3" for a in CLI_ARGS]
    refused = _interp("extract", "--trajectories", str(traj_file), "--store", str(root), *other, check=False)
    assert refused.returncode == 2, refused.stderr[-2000:]
    message = " ".join(refused.stderr.split())
    assert "layers: store has [0, 3, 7], run asks [0, 3]" in message and "Traceback" not in refused.stderr, message
    assert {p.name: p.stat().st_mtime_ns for p in root.rglob("*")} == before


@pytest.mark.slow
def test_cli_shards_then_merge(traj_file, ref_store, tmp_path):
    """``--shard 0/2`` and ``1/2`` (run concurrently) then ``interp merge``: identical to the single-store run."""
    shards = [tmp_path / f"shard{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "interp", "extract", "--trajectories", str(traj_file),
                               "--store", str(s), "--shard", f"{i}/2", *CLI_ARGS],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cli_env())
             for i, s in enumerate(shards)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    assert _done_units(shards[0]) == 3 and _done_units(shards[1]) == 3
    merged = tmp_path / "merged"
    out = _interp("merge", str(merged), *map(str, shards))
    assert "12 rows from 2 shard(s)" in " ".join(out.stdout.split()), out.stdout
    _assert_same_store(merged, ref_store, traj_file)


def test_bad_request_is_refused_before_the_store_exists(tiny_sensor, trajs, tmp_path):
    """A misspelt pooling (or condition, parameter, boundary) fails before any file is written,
    so the corrected run then succeeds in the same directory (no StoreMismatch)."""
    root = tmp_path / "store"
    mini = [t for t in trajs if t.task_id == "mini-code-1"]
    with pytest.raises(ValueError, match="poolings.*mean_reasonig"):
        ExtractConfig(layers=[0], poolings=["last", "mean_reasonig"])
    config = ExtractConfig(layers=[0], poolings=["last"])
    with pytest.raises(dataclasses.FrozenInstanceError):  # frozen: no edit after construction can skip the check
        config.poolings = ["last", "mean_reasonig"]  # type: ignore[misc]
    assert not root.exists()
    good = ExtractConfig(layers=[0], poolings=["last", "mean_reasoning"])
    for conditions, kwargs, match in [
        (["ful"], {}, "unknown condition 'ful'"),
        (["iclr"], {}, "scorer"),
        (["full"], {"condition_params": {"full": {"rho": 0.5}}}, "takes no parameter"),
        (["full"], {"condition_params": {"iclr": {}}}, "not requested"),
        (["full"], {"boundaries": [0, 1]}, "out of range"),
        (["full"], {"boundaries": [mini[0].n_steps + 1]}, "out of range"),
        (["full"], {"shard": (2, 2)}, "shard"),
    ]:
        kwargs = {"boundaries": [1], **kwargs}
        with pytest.raises(ValueError, match=match):
            extract_to_store(tiny_sensor, mini, conditions, good, root, progress=False, **kwargs)
        assert not root.exists(), (conditions, kwargs)
    counts = extract_to_store(tiny_sensor, mini, ["full"], good, root, boundaries=[1], progress=False)
    assert counts["samples"] == 1 and (root / "store.json").exists()
    assert json.loads((root / "store.json").read_text())["settings"]["poolings"] == ["last", "mean_reasoning"]
