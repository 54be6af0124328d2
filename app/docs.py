"""Reference text from the provider kinds' own declarations (``engine.PROVIDER_KINDS``).

``omnipost provider kinds [--json]`` lists each kind's options for people and scripts;
``python -m app.docs provider-options`` prints the options table of docs/providers.md, which
lives between the markers below and is checked against this output by the tests, so it cannot
drift from what a provider accepts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from app.output import print_json
from engine import COMMON_OPTIONS, PROVIDER_KINDS, OptionSpec, ProviderKind

__all__ = [
    "BEGIN",
    "END",
    "kinds_json",
    "main",
    "page_table",
    "provider_kinds",
    "provider_options_table",
]

BEGIN = "<!-- provider-options:begin -->"
END = "<!-- provider-options:end -->"


def _row(kind: str, spec: OptionSpec) -> str:
    cells = (kind, f"`{spec.name}`", spec.type_text, spec.default_text, spec.help)
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def provider_options_table(kinds: Iterable[ProviderKind] | None = None) -> str:
    """The Markdown table of every kind's own options and secrets, then the common ones."""
    chosen = list(PROVIDER_KINDS.values() if kinds is None else kinds)
    lines = ["| Kind | Option | Type | Default | What it does |", "| --- | --- | --- | --- | --- |"]
    for kind in chosen:
        lines += [_row(f"`{kind.name}`", spec) for spec in kind.own_options]
    lines += [_row("every kind", spec) for spec in COMMON_OPTIONS]
    return "\n".join(lines) + "\n"


def page_table(page: str) -> str:
    """The text between the markers of ``page`` (docs/providers.md's content); raises
    ValueError when they are missing."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/providers.md has no {BEGIN} ... {END} section")
    return page[start + len(BEGIN) : end].strip("\n") + "\n"


def kinds_json() -> list[dict[str, Any]]:
    """Every kind with its options, as ``provider kinds --json`` prints them."""
    return [
        {
            "kind": kind.name,
            "summary": kind.summary,
            "options": [
                {
                    "name": spec.name,
                    "type": "secret" if spec.secret else spec.type,
                    "default": spec.default,
                    "required": spec.required,
                    "choices": list(spec.choices),
                    "help": spec.help,
                }
                for spec in kind.options
            ],
        }
        for kind in PROVIDER_KINDS.values()
    ]


async def provider_kinds(*, as_json: bool) -> int:
    """``omnipost provider kinds``: each kind, and what its ``--option``/``--secret`` take."""
    if as_json:
        print_json(kinds_json())
        return 0
    for kind in PROVIDER_KINDS.values():
        print(f"{kind.name}: {kind.summary}")
        for spec in kind.own_options:
            flag = "--secret" if spec.secret else "--option"
            print(f"  {flag} {spec.name}=...  {spec.hint()}")
    print("every kind:")
    for spec in COMMON_OPTIONS:
        print(f"  --option {spec.name}=...  {spec.hint()}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m app.docs provider-options``: print the table of docs/providers.md."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args != ["provider-options"]:
        print("usage: python -m app.docs provider-options", file=sys.stderr)
        return 2
    sys.stdout.write(provider_options_table())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
