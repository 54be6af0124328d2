"""``docs/benchmarks.md``: the template ``templates/benchmarks.md.j2`` filled from the JSON.

The explanations are the template's text, for a reader to edit; the numbers come from
``sections`` (one function per section); tables are drawn by ``tabulate``. The page is then
wrapped at 88 columns, so the template can keep one sentence per line.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import jinja2
from tabulate import tabulate

from reporting import sections
from reporting.api import api as api_section
from reporting.console import console as console_section
from reporting.lifetimes import lifetimes as lifetimes_section
from reporting.providers import providers as providers_section
from reporting.sections import Data
from reporting.startup import startup as startup_section
from reporting.status_events import status_events as events_section
from reporting.tenants import tenants as tenants_section
from reporting.workers import workers as workers_section

__all__ = ["render", "table"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
WIDTH = 88
_NUMBER = re.compile(r"\**[-+]?\d")  # a cell that starts with a figure (bold or not)
# What would start a list, a heading or a quote if a wrapped line began with it.
_MARKER = re.compile(r"(\d+[.)]|[-+*>]|#+)(\s|$)")


def table(rows: Sequence[Sequence[str]], *headers: str) -> str:
    """A GitHub table: columns of figures aligned right, the others left."""
    align = ["right" if _figures(column) else "left" for column in zip(*rows, strict=True)]
    return tabulate(rows, headers, tablefmt="pipe", colalign=align or None, disable_numparse=True)


def _figures(cells: Sequence[str]) -> bool:
    filled = [c for c in cells if c not in ("", "-")]
    return bool(filled) and all(_NUMBER.match(c) for c in filled)


def render(
    data: dict[str, Data | None],
    images: dict[str, list[str]],
    timings: dict[str, float],
    commands: dict[str, str],
) -> str:
    """The page, from each benchmark's JSON (None where it has not run) and the plots' paths."""

    def section(name: str, prepare: sections.Section) -> sections.Context | None:
        d = data.get(name)
        return None if d is None else prepare(d)

    template = _environment().get_template("benchmarks.md.j2")
    page = template.render(
        images=images,
        header=sections.header(data, timings, commands),
        drain=section("drain_peers", sections.drain),
        limiters=section("limiter_peers", sections.limiters),
        fidelity=section("fidelity", sections.fidelity),
        fairness=section("fairness", sections.fairness),
        scale=section("scale_queue", sections.scale),
        deep=section("deep_store", sections.deep),
        plan=section("plan", sections.plan),
        console=section("console", console_section),
        tenants=section("tenants", tenants_section),
        workers=section("workers", workers_section),
        lifetimes=section("lifetimes", lifetimes_section),
        status_events=section("status_events", events_section),
        startup=section("startup", startup_section),
        api=section("http_api", api_section),
        providers=section("providers", providers_section),
        micro=sections.micro(data.get("bucket"), data.get("redis_limiter")),
    )
    return reflow(page)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a misspelt field fails instead of printing nothing
        autoescape=False,  # Markdown, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(n=sections.n, x=sections.x, g=sections.g, table=table)
    return env


# -- wrapping -------------------------------------------------------------------------------


def reflow(page: str, width: int = WIDTH) -> str:
    """Wrap paragraphs and bullets to ``width``, one blank line between blocks; headings,
    tables, images and fenced code stay as they are."""
    return "\n\n".join(_wrap_block(block, width) for block in _blocks(page)) + "\n"


def _blocks(page: str) -> Iterator[list[str]]:
    """The runs of lines between blank lines (a fenced block is one run, blank lines and all)."""
    block: list[str] = []
    fenced = False
    for line in page.splitlines():
        fenced ^= line.startswith("```")
        if line.strip() or fenced:
            block.append(line.rstrip())
        elif block:
            yield block
            block = []
    if block:
        yield block


def _wrap_block(block: list[str], width: int) -> str:
    if block[0].startswith(("```", "|", "#", "![")):
        return "\n".join(block)
    items: list[list[str]] = []  # a paragraph, or one list item each
    for line in block:
        if line.startswith("- ") or not items:
            items.append([])
        items[-1].append(line.strip())
    return "\n".join(_fill(" ".join(item), width) for item in items)


def _fill(text: str, width: int) -> str:
    words = text.split()  # the template's line breaks and indents are only spaces
    bullet = words[0] == "-"
    indent = "  " if bullet else ""
    lines = textwrap.wrap(
        " ".join(words[1:] if bullet else words),
        width,
        initial_indent="- " if bullet else "",
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,  # a line break after "-" would read as a space
    )
    out = lines[:1]
    for line in lines[1:]:
        rest = line.removeprefix(indent)
        if _MARKER.match(rest):  # keep it on the line before, or it becomes a list item
            out[-1] += " " + rest
        else:
            out.append(line)
    return "\n".join(out)
