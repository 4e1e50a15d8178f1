"""Every result records the config that made it, and every parameter a figure, table or report.md prints is read
from that record: written with non-default configs, the outputs show the non-default values, never the defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from interp.extraction.entropy import IclrConfig
from interp.externalization.risk import RiskConfig
from interp.pipelines.configs import CONFIGS
from interp.record import RECORD_FIELDS, config_dict, config_from, file_sha256, record
from interp.reporting.analyses import ANALYSES, resolve
from interp.reporting.figures import load_result, make_figures
from interp.reporting.report import write_report
from interp.reporting.tables import write_tables
from patching.config import DrsrConfig, GateConfig, HarmConfig, PatchConfig
from tests.figures.conftest import CONFIGS as WRITTEN
from tests.figures.conftest import write_results

pytestmark = pytest.mark.unit


def _instance(cls: type) -> object:
    """The config with its defaults, a required field given the smallest value of its declared type (layer 0)."""
    required = {f.name: ([0] if "list" in str(f.type) else (0,) if "tuple" in str(f.type) or "Sequence" in str(f.type)
                         else 0)
                for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    return cls(**required)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_registered_config_round_trips_through_its_record(name):
    """asdict -> JSON -> the config class -> equal, for every config of the registry (defaults; required: minimal)."""
    config = _instance(CONFIGS[name])
    block = json.loads(json.dumps(record(config)))["config"]
    assert block == json.loads(json.dumps(dataclasses.asdict(config)))
    assert config_from(CONFIGS[name], block) == config


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    return write_results(tmp_path_factory.mktemp("recorded"))


@pytest.mark.parametrize("analysis", [a for a in ANALYSES if a.name in WRITTEN], ids=lambda a: a.name)
def test_every_result_file_round_trips_its_config(written, analysis):
    """The config a writer recorded comes back equal from the result file (every analysis of the registry)."""
    config = WRITTEN[analysis.name]
    doc = load_result(written / analysis.path())
    doc = doc.attrs["record"] if hasattr(doc, "attrs") else doc
    assert set(f.name for f in RECORD_FIELDS) <= set(doc)
    if dataclasses.is_dataclass(config):
        assert config_from(type(config), doc["config"]) == config
    else:
        assert doc["config"] == config
    assert doc["provenance"]["package"] == "reasoning-persistence" and doc["provenance"]["version"]


@pytest.mark.parametrize("analysis", [a for a in ANALYSES if a.section], ids=lambda a: a.name)
def test_every_report_section_states_its_recorded_config(written, analysis):
    """Discovered over the registry: each section of report.md ends with every field of the config it ran with."""
    text = (written / "report.md").read_text() if (written / "report.md").exists() else write_report(
        written, {}, {}, {"model": "toy", "full": False}).read_text()
    section = text.split(f"## {analysis.title}\n", 1)[1].split("\n## ", 1)[0]
    doc = load_result(written / analysis.path())
    config = (doc.attrs["record"] if hasattr(doc, "attrs") else doc)["config"]
    ran = next(line for line in section.splitlines() if line.startswith("_Ran with_"))
    assert all(f"{key} = " in ran for key in config), ran


def test_the_record_hashes_inputs_and_names_seeds(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"abc")
    block = record(DrsrConfig(seed=3), model={"spec": "m", "revision": "r", "dtype": "torch.bfloat16"}, device="cpu",
                   inputs={"trajectories": path, "labels": None, "given": "a" * 64})
    assert block["provenance"]["inputs"] == {
        "trajectories": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "given": "a" * 64}
    assert block["provenance"]["seeds"] == {"seed": 3} and block["provenance"]["dtype"] == "bfloat16"
    assert (block["provenance"]["model"], block["provenance"]["revision"]) == ("m", "r")
    assert file_sha256(tmp_path) != file_sha256(path)  # a folder: its files' names and hashes
    assert config_dict({"condition": "full"}) == {"condition": "full"}


# (analysis whose config changes, the non-default config, what the outputs must say, what they must not)
CASES = [
    ("rho", "iclr", IclrConfig(rho=0.5, max_tokens=5000),
     {"figures/fig6_iclr.html": ["rho = 0.5", "5000-token limit"],
      "report.md": ["| ICLR statistic (rho = 0.5) |", "over the 5000-token limit"]},
     ["rho = 0.8", "42000-token", "42K"]),
    ("max_k and budget", "drsr", DrsrConfig(max_k=3, budget=7, n_boot=100),
     {"figures/fig8_granularity.html": ["sets up to 3 units (7 per size)"],
      "report.md": ["sets up to 3 units, 7 sampled per size; margin"]},
     ["sets up to 4 units", "10 sampled per size; margin", "(10 per size)"]),
    ("margin (DRSR)", "drsr", DrsrConfig(margin=0.035, n_boot=100),
     {"figures/fig9_relations.html": ["margin 0.035"], "report.md": ["margin 0.035 nats/token"]},
     ["margin 0.020"]),
    ("margin (harm)", "harm", HarmConfig(margin=0.03, max_k=3, budget=6),
     {"figures/fig7_harm.html": ["margin of 0.030 nats/token; sets up to 3 units, 6 sampled per size"],
      "tables/harm.md": ["pairs (margin 0.03)"], "report.md": ["less than 0.030 nats/token"]},
     ["pairs (margin 0.0)", "margin of 0.000"]),
    ("unsafe threshold", "drsr", DrsrConfig(unsafe=0.045, n_boot=100),
     {"figures/fig8_granularity.html": ["unsafe: harm above 0.045 nats/token"],
      "report.md": ["unsafe: harm above 0.045 nats/token"]},
     ["unsafe: harm above 0.020"]),
    ("layers", "kl_repair", PatchConfig(layers="full_attention"),
     {"figures/fig2_kl_repair.html": ["layers full_attention"], "report.md": ["layers `full_attention`"]},
     ["layers all", "layers `all`"]),
    ("n_boot (DRSR)", "drsr", DrsrConfig(n_boot=60),
     {"figures/fig8_granularity.html": ["CIs from 60 task-bootstrap resamples"],
      "report.md": ["CIs from 60 task-bootstrap resamples"]},
     ["CIs from 100 task-bootstrap", "CIs from 1000 task-bootstrap"]),
    ("n_boot (externalization)", "externalization", RiskConfig(n_boot=150),
     {"report.md": ["n_boot = 150"]}, ["n_boot = 200", "n_boot = 1000"]),
    ("n_boot (gate)", "gate", GateConfig(n_boot=40),
     {"report.md": ["n_boot = 40"]}, ["n_boot = 50", "n_boot = 1000"]),
]


def _text(path: Path) -> str:
    """A written output as read: a figure's JSON escapes undone and its subtitle's line breaks as spaces."""
    text = path.read_text(encoding="utf-8")
    for escaped, char in (("\\u003cbr\\u003e", " "), ("<br>", " "), ("\\u003c", "<"), ("\\u003e", ">"),
                          ("\\u002f", "/"), ("\\u00d7", "×"), ("\\u2264", "≤")):
        text = text.replace(escaped, char)
    return " ".join(text.split(" "))


def _outputs(root: Path) -> None:
    report = make_figures(root, png=False)
    assert not report["failed"], report["failed"]
    write_tables(root)
    write_report(root, {}, {}, {"model": "toy", "full": False})


@pytest.mark.parametrize("what, name, config, shown, hidden", CASES, ids=[c[0] for c in CASES])
def test_a_non_default_parameter_is_printed_from_the_result(tmp_path, what, name, config, shown, hidden):
    root = write_results(tmp_path, configs={name: config})
    _outputs(root)
    for file, texts in shown.items():
        text = _text(root / file)
        section = text.split(f"## {next(a.title for a in ANALYSES if a.name == name)}\n", 1)[1].split("\n## ")[0] \
            if file == "report.md" else text
        for value in texts:
            assert value in section, (what, file, value)
        for value in hidden:
            assert value not in section, (what, file, value)


def test_dtype_and_noise_factor_are_printed_from_the_result(tmp_path):
    """The sensor dtype (provenance) and the noise rule's factor (the result) as recorded, edited in a real file."""
    root = write_results(tmp_path)
    path = root / "patching" / "kl_repair.json"
    doc = json.loads(path.read_text())
    assert doc["provenance"]["dtype"] is None and doc["noise_factor"] == 10.0 and doc["n_excluded"]
    doc["provenance"]["dtype"], doc["noise_factor"] = "bfloat16", 7.0
    path.write_text(json.dumps(doc))
    _outputs(root)
    html = _text(root / "figures" / "fig2_kl_repair.html")
    assert "dtype bfloat16" in html and "≤ 7 × its measured noise" in html and "10 × its measured" not in html
    report = (root / "report.md").read_text()
    assert "model dtype bfloat16." in report and "dtype bfloat16, device" in report


def test_a_result_without_a_record_is_refused_by_name(tmp_path):
    root = write_results(tmp_path)
    (root / "iclr" / "iclr_blocks.json").unlink()
    report = make_figures(root, png=False)
    assert "no record beside it" in report["failed"]["fig6_iclr"]
    text = write_report(root, {}, {}, {"model": "toy", "full": False}).read_text()
    assert "_not readable: " in text and "no record beside it (its name as .json)" in text


def test_the_record_fields_are_declared_by_every_json_writer_of_the_registry():
    """Every JSON result file of the registry declares config and provenance in its schema (a CSV: beside it)."""
    for analysis in ANALYSES:
        for file in analysis.files:
            if file.name.endswith(".json"):
                names = {f.name for f in resolve(file.schema)}
                assert {"config", "provenance"} <= names, file.name
