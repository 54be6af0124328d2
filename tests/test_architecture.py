"""The shape of the code: what import-linter cannot see, and the size of the rooms.

import-linter (pyproject.toml) checks that ``ui`` and ``app`` import only the ``engine``
package's public names. These tests check the rest of the façade (no reaching through an
engine's private parts by attribute), that no module grows past about 450 lines, that
``Engine``'s menu names every public method where it is, and that no test (nor benchmark)
imports a test module or ``conftest.py``: what they share is in ``testkit``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "app", "ui")
# An engine's parts, private to it: the console and the CLI use its read models instead.
PRIVATE_PARTS = {"store", "dispatcher", "directory", "telemetry"}
MAX_LINES = 450
# Files allowed past the cap, and why: cut by concept, not squeezed or split by count. Each
# stays under ``LONGEST`` and must be over the cap (else it leaves the list).
LONGER = {
    "engine/dispatch/dispatcher.py": "the loop's round, its claims' settling, what it learns"
    " from completions and its shares of the tenants read as one story: split, each half would"
    " call into the other",
    "engine/store/queue.py": "the queue as the dispatcher uses it, one class: the writes of a"
    " lease's life and the reads of which pairs have due work (their SQL is counts.py's); a"
    " tenant's notifications as people see them are notifications.py's",
    "engine/facade/engine.py": "the lifecycle, and the menu of the whole façade in Engine's"
    " docstring (the one table of contents, about 35 lines, kept true by a test below)",
}
LONGEST = 600


def _sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def _reaches_in(tree: ast.AST) -> list[tuple[int, str]]:
    """``x.engine.store``, ``engine.dispatcher.y``, ``self._engine.telemetry`` and the like."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in PRIVATE_PARTS:
            continue
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if name in ("engine", "_engine"):
            found.append((node.lineno, f"{name}.{node.attr}"))
    return found


@pytest.mark.parametrize("path", _sources("ui", "app"), ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_and_app_do_not_reach_into_the_engine(path: Path) -> None:
    reaches = _reaches_in(ast.parse(path.read_text(encoding="utf-8")))
    assert not reaches, [f"{path.name}:{line} {what}" for line, what in reaches]


def test_the_check_finds_a_reach() -> None:
    tree = ast.parse("a = self.bridge.engine.dispatcher.concurrency\nb = engine.store_url\n")
    assert _reaches_in(tree) == [(1, "engine.dispatcher")]


@pytest.mark.parametrize("path", _sources(*PACKAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    name = str(path.relative_to(ROOT))
    if name in LONGER:
        assert MAX_LINES < lines <= LONGEST, f"{name} has {lines} lines: take it off LONGER"
        return
    assert lines <= MAX_LINES, (
        f"{name} has {lines} lines; split it by concept, or name it in LONGER"
    )


def _menu(doc: str) -> dict[str, str]:
    """``Engine``'s menu: each name between double backquotes on a ``- family (``module``):``
    line (and the lines continuing it), with the module of the façade it says holds it."""
    found: dict[str, str] = {}
    module = ""
    for line in doc.splitlines():
        head = re.match(r"\s*- [^(]+\(``(\w+)``\):(.*)", line)
        names = line
        if head:
            module, names = head.group(1), head.group(2)
        elif not line.startswith("      "):  # a line that continues none
            module = ""
        if module:
            found |= dict.fromkeys(re.findall(r"``(\w+)``", names), module)
    return found


def test_the_engines_menu_names_every_public_method_where_it_is() -> None:
    from engine.facade.engine import Engine

    menu = _menu(Engine.__doc__ or "")
    public = {name for name in dir(Engine) if not name.startswith("_")}
    assert set(menu) == public, (
        f"missing from the menu: {sorted(public - set(menu))}; "
        f"on it, but not on Engine: {sorted(set(menu) - public)}"
    )
    for name, module in menu.items():
        owner = next(c for c in Engine.__mro__ if name in vars(c))
        assert owner.__module__ == f"engine.facade.{module}", (name, owner.__module__)


# Verbs that would start a verb-first name; the lifecycle's own verbs (start, stop, pause, ...)
# and enqueue are the engine's, not a family's, and stay verbs.
_VERBS = {
    "add", "update", "import", "set", "check", "create", "revoke", "remove", "enable",
    "disable", "rotate", "replay", "retry", "discard", "cancel", "suppress", "unsuppress",
    "claim", "finish", "abandon", "test", "resume", "sweep", "delete", "list", "get",
}  # fmt: skip


def test_the_engines_methods_are_named_noun_first_so_families_sort_together() -> None:
    from engine.facade.engine import Engine

    public = [name for name in dir(Engine) if not name.startswith("_") and "_" in name]
    verb_first = [name for name in public if name.split("_")[0] in _VERBS]
    assert not verb_first, f"name these noun first (tenant_add, dead_retry): {verb_first}"


def test_the_menu_check_reads_families_and_their_continued_lines() -> None:
    doc = """Intro ``not_this``.

    - one (``a``): ``x`` ``y``
      ``z``
    - two (``b``): ``w``
    """
    assert _menu(doc) == {"x": "a", "y": "a", "z": "a", "w": "b"}


def _imports_of_tests(tree: ast.AST) -> list[str]:
    """The modules of ``tests`` that ``tree`` imports (``tests.x``, ``from tests import x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tests" or node.module.startswith("tests."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "tests"]
    return found


@pytest.mark.parametrize(
    "path",
    sorted(
        [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *_sources("testkit")]
    ),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_nothing_imports_a_test_module_or_conftest(path: Path) -> None:
    """What tests share is in the test kit (``testkit``), never in another test module."""
    found = _imports_of_tests(ast.parse(path.read_text(encoding="utf-8")))
    assert not found, f"{path.name} imports {found}: put what it needs in testkit/"


def test_the_import_check_finds_a_test_module() -> None:
    tree = ast.parse("from tests.conftest import X\nimport tests.support\nfrom testkit import y\n")
    assert _imports_of_tests(tree) == ["tests.conftest", "tests.support"]
