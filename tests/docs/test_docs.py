"""The documentation site: built strictly and offline, its reference complete against the live code, its examples run.

The site is built once per test session in-process (``mkdocs build --strict``, what ``make docs`` runs) and
shared between xdist workers under a file lock. Checked against the code, independently of the build hook:

- every command and option of the live typer app has its anchor on the CLI page, with its default;
- every public function and class of every public module has its heading on the API pages;
- every guide under docs/guides/ is linked from the home page (one click);
- the built HTML loads no script, stylesheet or font from another host;
- every ```python block of the hand-written pages runs (the convention in docs/contributing.md);
- a renamed page and a removed option break the build (a temporary copy of the docs, a monkeypatched app);
- a guide the nav does not name is appended to its Guides section by the hook.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import pkgutil
import re
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGES = ("interp", "probes", "patching")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def build(config_file: Path, site_dir: Path) -> None:
    """``mkdocs build --strict`` of ``config_file`` into ``site_dir`` (raises mkdocs' Abort on any warning)."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    config = load_config(config_file=str(config_file), strict=True, site_dir=str(site_dir))
    config.plugins.on_startup(command="build", dirty=False)
    try:
        mkdocs_build(config)
    finally:
        config.plugins.on_shutdown()


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from this checkout, once for all workers."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this session's, never an older one's
    site_dir = shared / "docs-site"
    with FileLock(str(shared / "docs-site.lock")):
        if not (site_dir / "index.html").exists():
            build(ROOT / "mkdocs.yml", site_dir)
    return site_dir


def page(site: Path, uri: str) -> str:
    """The built HTML of the page whose source is ``uri`` (``reference/cli.md``)."""
    stem = uri.removesuffix(".md")
    path = site / ("index.html" if stem == "index" else f"{stem.removesuffix('/index')}/index.html")
    return path.read_text(encoding="utf-8")


def live_commands() -> list[tuple[str, object]]:
    """(full name, click command) of every visible leaf command of the ``interp`` app."""
    import typer

    from interp.pipelines.cli import app

    found: list[tuple[str, object]] = []

    def walk(group: object, name: str) -> None:
        for sub in group.list_commands(None):  # type: ignore[attr-defined]
            command = group.get_command(None, sub)  # type: ignore[attr-defined]
            if command.hidden:
                continue
            if hasattr(command, "commands"):
                walk(command, f"{name} {sub}")
            else:
                found.append((f"{name} {sub}", command))

    walk(typer.main.get_command(app), "interp")
    return found


def test_cli_reference_lists_every_command_and_option(site: Path) -> None:
    html = page(site, "reference/cli.md")
    commands = live_commands()
    assert len(commands) >= 25 and {"interp patch", "interp gate train", "interp labels agree"} <= {n for n, _ in commands}
    missing = []
    for name, command in commands:
        base = name.replace(" ", "-")
        if f'id="{base}"' not in html:
            missing.append(name)
        for param in command.params:  # type: ignore[attr-defined]
            if param.hidden or param.name == "help":
                continue
            key = param.opts[0] if param.param_type_name == "option" else param.name
            if f'id="{base}--{key.lstrip("-")}"' not in html:
                missing.append(f"{name} {key}")
            default = param.default
            if param.param_type_name == "option" and default not in (None, False, ()) and not callable(default) \
                    and param.show_default is not False:
                shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
                if f"[default: {shown}" not in html.replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&"):
                    missing.append(f"{name} {key} default {shown!r}")
    assert not missing, f"the CLI reference lacks: {missing}"


def public_modules() -> list[str]:
    """Every module of the packages with no ``_``-prefixed part."""
    names = []
    for package in PACKAGES:
        names.append(package)
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def test_api_reference_lists_every_public_function(site: Path) -> None:
    missing = []
    checked = 0
    for name in public_modules():
        module = importlib.import_module(name)
        html = (site / "reference" / "api" / name / "index.html").read_text(encoding="utf-8")
        for attr, obj in vars(module).items():
            if attr.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != name:
                continue  # imported from elsewhere: documented where it is defined
            checked += 1
            if f'id="{name}.{attr}"' not in html:
                missing.append(f"{name}.{attr}")
    assert checked > 500, checked
    assert not missing, f"the API reference lacks: {missing}"
    import interp

    for public in interp.__all__:  # the package's lazy names (constants too), each on its defining module's page
        defining = interp._LAZY[public]
        html = (site / "reference" / "api" / defining / "index.html").read_text(encoding="utf-8")
        assert f'id="{defining}.{public}"' in html, (public, defining)


def test_every_guide_is_one_click_from_home(site: Path) -> None:
    home = page(site, "index.md")
    links = set(re.findall(r'href="([^"#]+)"', home))
    guides = sorted(p.stem for p in (DOCS / "guides").glob("*.md"))
    assert len(guides) >= 10
    unlinked = [g for g in guides if f"guides/{g}/" not in links]
    assert not unlinked, f"guides not linked from the home page: {unlinked}"


EXTERNAL = re.compile(r"""(?:<script[^>]*\ssrc|<link[^>]*\shref|<img[^>]*\ssrc|<iframe[^>]*\ssrc)=["']?((?:https?:)?//[^"'\s>]+)"""
                      r"""|@import\s+(?:url\()?["']?((?:https?:)?//[^"')\s]+)|url\(["']?((?:https?:)?//[^"')\s]+)""",
                      re.I)


def external_resources(text: str) -> list[str]:
    """URLs of scripts, stylesheets, images, frames and fonts ``text`` (HTML or CSS) loads from another host."""
    return [next(g for g in m.groups() if g) for m in EXTERNAL.finditer(text)]


def test_external_resource_scan_finds_cdn_loads() -> None:
    assert external_resources('<script src="https://cdn.example.org/x.js"></script>') == ["https://cdn.example.org/x.js"]
    assert external_resources("<link rel=stylesheet href='//fonts.googleapis.com/css?family=Roboto'>")
    assert external_resources("@font-face{src:url(https://fonts.gstatic.com/a.woff2)}")
    assert external_resources('@import "https://x.org/a.css";')
    assert not external_resources('<a href="https://squidfunk.github.io/">Material</a><script src="../assets/a.js">')


def test_site_loads_nothing_from_another_host(site: Path) -> None:
    found = {}
    for path in site.rglob("*"):
        if path.suffix in (".html", ".css", ".js") and path.is_file():
            urls = external_resources(path.read_text(encoding="utf-8", errors="replace"))
            urls = [u for u in urls if "www.w3.org" not in u]  # SVG namespaces, never fetched
            if urls:
                found[str(path.relative_to(site))] = urls[:3]
    assert not found, f"pages that fetch from another host: {found}"


def hand_written() -> list[Path]:
    """The Markdown pages under docs/ (the generated ones live only in the built site)."""
    return sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a page, in order (other fences are shown, never run)."""
    return [code for lang, code in FENCE.findall(path.read_text(encoding="utf-8")) if lang == "python"]


def test_fence_convention() -> None:
    text = "a\n```python\nx = 1\n```\n```text\ny\n```\n```console\n$ z\n```\n```python title=\"t\"\nw = 2\n```\n"
    assert [c for lang, c in FENCE.findall(text) if lang == "python"] == ["x = 1\n", "w = 2\n"]


EXAMPLES = [p for p in hand_written() if python_blocks(p)]


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(DOCS)) for p in EXAMPLES])
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ```python block of a page runs, in order in one namespace, in a fresh folder holding ``data/``."""
    (tmp_path / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"__name__": "docs_example"}
    for i, code in enumerate(python_blocks(path)):
        exec(compile(code, f"{path.relative_to(ROOT)} (python block {i + 1})", "exec"), scope)


def test_every_guide_example_page_is_collected() -> None:
    guides_with_code = {p.name for p in EXAMPLES if p.parent.name == "guides"}
    assert {"extract-and-probe.md", "kl-repair.md", "continuations.md", "token-accounting.md"} <= guides_with_code


def broken_copy(tmp_path: Path) -> Path:
    """A copy of the docs beside links to this checkout's packages and notebooks; returns its mkdocs.yml."""
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    for name in (*PACKAGES, "notebooks"):
        (copy / name).symlink_to(ROOT / name)
    return copy / "mkdocs.yml"


def test_renamed_page_and_removed_option_break_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    import typer
    from mkdocs.exceptions import Abort

    config = broken_copy(tmp_path)
    docs = config.parent / "docs"
    (docs / "guides" / "gpu.md").rename(docs / "guides" / "gpus.md")  # a page renamed, its links left as they were
    get_command = typer.main.get_command

    def without_max_k(app: typer.Typer) -> object:  # an option removed from `interp drsr`
        root = get_command(app)
        drsr = root.get_command(None, "drsr")  # type: ignore[attr-defined]
        drsr.params = [p for p in drsr.params if p.name != "max_k"]
        return root

    monkeypatch.setattr(typer.main, "get_command", without_max_k)
    with caplog.at_level(logging.WARNING), pytest.raises(Abort, match="strict mode"):
        build(config, tmp_path / "site")
    warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "guides/gpu.md" in warnings, warnings
    assert "interp-drsr--max-k" in warnings, warnings


def test_a_guide_missing_from_the_nav_is_appended_to_guides(tmp_path: Path) -> None:
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "_hooks" / "generate.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (tmp_path / "guides").mkdir()
    for name in ("a.md", "new.md", "later.md"):
        (tmp_path / "guides" / name).write_text("# x\n")
    nav = [{"Home": "index.md"}, {"Guides": ["guides/a.md", {"Later": "guides/later.md"}]}]
    hook.on_config(SimpleNamespace(nav=nav, docs_dir=str(tmp_path)))
    assert nav[1]["Guides"] == ["guides/a.md", {"Later": "guides/later.md"}, "guides/new.md"]
