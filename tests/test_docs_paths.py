"""The README and docs/*.md name only what exists: every repository path they mention (attnviz/...,
tests/..., bench/..., docs/..., deploy/..., scripts/...), every module they name by its dotted name
(attnviz.serve.bandpool), every relative link and image, and every #anchor of a link into a page;
the same for the tutorial notebook the README opens with.
The README stays a five-minute read (at most 250 lines) and opens with the two set-up commands,
`make run` then `make test`, before any other command: CI runs the README's test command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 250

ROOTS = ("attnviz", "tests", "bench", "docs", "deploy", "scripts", ".ci", ".streamlit")
# A path starts at one of the roots, not inside another word or path (`notes/docs/x` is not ours).
_ROOTS = "|".join(re.escape(r) for r in ROOTS)
PATH = re.compile(rf"(?<![\w./~-])((?:{_ROOTS})/[\w./{{}},*<>-]*)")
MODULE = re.compile(r"(?<![\w./-])(attnviz(?:\.\w+)+)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def prose_and_code(text: str) -> tuple[list[str], list[str]]:
    """The lines outside fenced code blocks, and those inside them."""
    prose, code, inside = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        (code if inside else prose).append(line)
    return prose, code


def expand(path: str) -> list[str]:
    """`attnviz/assets/probes/{en,zh}.toml` -> both files; anything else as it is."""
    braces = re.search(r"\{([^}]*)\}", path)
    if not braces:
        return [path]
    head, tail = path[: braces.start()], path[braces.end() :]
    return [p for part in braces.group(1).split(",") for p in expand(head + part + tail)]


def named_paths(text: str) -> set[str]:
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if "<" in path or "..." in path:  # a placeholder (tests/<file>.py), not a path
            continue
        found.update(expand(path))
    return found


def path_exists(path: str) -> bool:
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose, _ = prose_and_code(text)
    seen: dict[str, int] = {}
    out = set()
    for line in prose:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def module_exists(dotted: str) -> bool:
    """attnviz.a.b(.name...): the longest prefix that is a module or package, and the next name,
    if any, defined or imported in it (a function, a class, a constant)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = next(
            (p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None
        )
        if source is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        return (
            re.search(rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8")) is not None
        )
    return False


def problems(page: Path, text: str | None = None) -> list[str]:
    """What `page` (its text, or `text` as if it were there) names that does not exist."""
    text = page.read_text(encoding="utf-8") if text is None else text
    where = page.relative_to(ROOT)
    out = [f"{where}: no such path {p}" for p in sorted(named_paths(text)) if not path_exists(p)]
    out += [
        f"{where}: no such module or name {m}"
        for m in sorted({m.group(1) for m in MODULE.finditer(text)})
        if not module_exists(m)
    ]
    prose, _ = prose_and_code(text)
    for target in LINK.findall("\n".join(prose)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        if not file:
            if anchor not in anchors(text):
                out.append(f"{where}: no heading for #{anchor}")
            continue
        linked = (page.parent / file).resolve()
        if not linked.exists():
            out.append(f"{where}: broken link {target}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text("utf-8")):
            out.append(f"{where}: no heading for #{anchor} in {linked.relative_to(ROOT)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_module_and_link_a_page_names_exists(page: Path) -> None:
    assert not problems(page), "\n".join(problems(page))


def test_the_tutorial_notebook_names_only_what_exists() -> None:
    """docs/notebook_example.ipynb, the README's "start here": its cells' paths, modules, links."""
    notebook = ROOT / "docs" / "notebook_example.ipynb"
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    found = problems(notebook, text + "\n\n```\n" + code + "\n```\n")
    assert not found, "\n".join(found)


def test_the_docs_pages_are_linked_from_the_readme() -> None:
    readme = README.read_text(encoding="utf-8")
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]
    assert not missing, f"README links no docs page for {missing}"


def test_readme_is_short_and_opens_with_make_run_then_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    first_fence = next(i for i, line in enumerate(lines) if FENCE.match(line))
    before = "\n".join(lines[:first_fence])
    assert "`" not in before, "a command or code span comes before the set-up commands"
    block = []
    for line in lines[first_fence + 1 :]:
        if FENCE.match(line):
            break
        if line.strip() and not line.lstrip().startswith("#"):
            block.append(line.split("#", 1)[0].strip())
    assert block[:2] == ["make run", "make test"], block[:2]


def test_the_checks_can_fail() -> None:
    """The checks above find a missing path, module, link and anchor (a check that cannot fail
    proves nothing). The page is read as if it were in docs/, without writing it there."""
    text = (
        "# Probe\n\nSee `attnviz/views/heatmaps.py`, `attnviz.engine.no_such_module`,\n"
        "[a page](nowhere.md), [a heading](explorer.md#no-such-heading) and [here](#probe).\n"
    )
    found = problems(ROOT / "docs" / "probe.md", text)
    assert any("attnviz/views/heatmaps.py" in p for p in found), found
    assert any("attnviz.engine.no_such_module" in p for p in found), found
    assert any("nowhere.md" in p for p in found), found
    assert any("#no-such-heading" in p for p in found), found
    assert not any("#probe" in p for p in found), found
