"""The package's shape, read from its own imports: folders by job, imports only downward, no
cycle, no module past 450 lines, at most 8 modules loose in attnviz/.

    pages (attnviz/app.py, attnviz/app_pages/) -> ui -> serve -> views, lessons, claims
        -> measures (reading traces), training (the models attnviz trains) -> engine (making them)

claims (published claims measured on the shipped models, attnviz.reproduce) reads traces and
runs models like lessons: it imports engine and measures, and training (the lab's phase change
is measured on a run of the lab's own training code).

attnviz/i18n.py (the UI strings) is a foundation any job may import. The same reading prints a
summary: `python tests/test_layout.py` (rooms, arrows, cycles, the longest files).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "attnviz"
JOBS = ("engine", "measures", "training", "lessons", "claims", "views", "serve", "ui")
# What each job may import from attnviz, besides itself and the foundation modules.
ALLOWED = {
    "engine": set(),
    "measures": {"engine"},
    "training": {"engine"},
    "lessons": {"engine", "measures"},
    "claims": {"engine", "measures", "training"},
    "views": {"engine", "measures", "training", "claims"},
    "serve": {"engine", "measures", "training", "views", "lessons", "claims"},
    "ui": {"engine", "measures", "training", "views", "lessons", "serve", "claims"},
    "pages": {"engine", "measures", "training", "views", "lessons", "serve", "ui", "claims"},
}
FOUNDATION = {"attnviz.i18n"}
MAX_LINES = 450
MAX_LOOSE = 8


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (pages as attnviz.app_pages.x)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules `name` imports (at module level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # `from attnviz.ui import url` imports the module attnviz.ui.url; `from attnviz.ui
            # import t` imports what attnviz/ui/__init__.py hands on
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("attnviz"):
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def job(name: str) -> str | None:
    """engine, lessons, views, serve, ui, pages, or None for a loose module of attnviz/."""
    parts = name.split(".")
    if name == "attnviz.app" or (len(parts) > 1 and parts[1] == "app_pages"):
        return "pages"
    return parts[1] if len(parts) >= 2 and parts[1] in JOBS else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_imports_run_only_downward() -> None:
    wrong = []
    for name, targets in graph().items():
        here = job(name)
        for target in targets:
            there = job(target)
            if target in FOUNDATION or there == here or target == "attnviz":
                continue
            if here is None:  # a loose module: the public API (attnviz/__init__) and the CLI
                continue
            if there is None or there not in ALLOWED[here]:
                wrong.append(f"{name} ({here}) imports {target} ({there or 'loose'})")
    assert not wrong, "\n".join(wrong)


def test_only_ui_and_pages_import_streamlit() -> None:
    wrong = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        streamlit = any(m == "streamlit" or m.startswith("streamlit.") for m in names)
        if streamlit and job(name) not in ("ui", "pages"):
            wrong.append(name)
    assert not wrong


def test_modules_are_small_and_few_are_loose() -> None:
    known = modules()
    long = {n: len(p.read_text().splitlines()) for n, p in known.items()}
    assert not {n: k for n, k in long.items() if k > MAX_LINES}
    loose = [n for n in known if job(n) is None and n.count(".") == 1]
    assert len(loose) <= MAX_LOOSE, loose
    for folder in JOBS:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"attnviz/{folder}/__init__.py says what it may import"
        )


def test_no_view_function_takes_more_than_eight_parameters() -> None:
    """Figure functions take a handful of small option objects (attnviz.views.maps' Axis,
    Colour, Marks, Frame; images.Tiles; lines.LinesPick / LinesLook), not twenty keywords."""
    over = {}
    for path in sorted((PACKAGE / "views").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                n = len(names) + bool(a.vararg) + bool(a.kwarg) - (names[:1] in (["self"], ["cls"]))
                if n > 8:
                    over[f"{path.name}:{node.name}"] = n
    assert not over


def test_the_ui_asks_views_for_a_size_and_never_decides_one() -> None:
    """Whether an input is long, and whether a trace is lean, are the views' and the engine's:
    no ui module names `lean`, `LONG` or `is_long` (the page asks a view its one question; the
    view picks numbers, a heatmap or a picture)."""
    found = []
    for path in sorted((PACKAGE / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in (
                "lean",
                "LONG",
                "is_long",
                "NUMBERS_SIDE",
                "HEAD_IMAGE_SIDE",
                "MAX_WINDOW",
                "LINES_HOVER_MOST",
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
            if isinstance(node, ast.Constant) and node.value == "lean":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} '{node.value}'")
    assert not found


def test_one_registry_of_views() -> None:
    """The explorer's drawers, the URL's view= values and attnviz.show's views all come from
    attnviz.views.registry."""
    from attnviz.ui import url
    from attnviz.ui.explorer import DRAW
    from attnviz.views import notebook, registry

    assert url.VIEWS == registry.NAMES == tuple(DRAW)
    assert set(notebook.VIEWS) == {v.name for v in registry.VIEWS if v.figures is not None}
    assert {v.name for v in registry.VIEWS if v.weights_only} | {"explore"} == notebook.WEIGHTS_ONLY


MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8
# transformers fixes the attention function's parameters (module, query, key, value, mask,
# scaling=, dropout=, **kwargs); attnviz's own travel grouped in one more (attnviz_call).
ATTENTION_CONTRACT = "engine/hooked/intercept.py:attnviz_attention"


def test_no_function_over_80_lines_or_8_parameters() -> None:
    """Every function of the package reads in one screen and takes a handful of arguments (more
    go into a small frozen dataclass); the attention function registered with transformers may
    take as many parameters as its contract has."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where = f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"
            args = node.args
            n_params = len(args.posonlyargs + args.args + args.kwonlyargs)
            n_params += (args.vararg is not None) + (args.kwarg is not None)
            n_lines = node.end_lineno - node.lineno + 1
            if n_params > MAX_PARAMETERS and where == ATTENTION_CONTRACT:
                n_params = 0
            if n_lines > MAX_FUNCTION_LINES or n_params > MAX_PARAMETERS:
                found.append(f"{where} (line {node.lineno}): {n_lines} lines, {n_params} params")
    assert not found, "split these (extract helpers, group options):\n" + "\n".join(found)


def summary() -> str:
    edges = graph()
    known = modules()
    lines = {n: len(p.read_text().splitlines()) for n, p in known.items()}
    longest = sorted(lines.items(), key=lambda kv: -kv[1])[:5]
    loose = sorted(n for n in known if job(n) is None and n.count(".") == 1)
    return "\n".join(
        [
            f"modules (rooms): {len(known)}",
            f"import arrows between them: {sum(len(t) for t in edges.values())}",
            f"cycles: {cycles(edges) or 'none'}",
            f"loose in attnviz/: {len(loose)} {loose}",
            "longest: " + ", ".join(f"{n} {k}" for n, k in longest),
        ]
    )


LAYER_MODULES = {"engine/layer.py", "measures/grouped_layer.py"}  # the layer family's own
READERS = (
    "views",
    "ui",
    "serve",
    "measures",
    "claims",
)  # read traces through the layer's interface
KINDS = {"LeanLayer", "GroupedLayer", "MaskRule"}


def kind_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module asks which kind of layer it holds (`.lean`, `.base`, getattr of "lean",
    "grouped" or "base", isinstance of a kind, a trace's meta["grouped"]), or names a layer's
    private slot "_stored_...". (line, what)"""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "_stored_" in node.value:
                found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Attribute) and node.attr in ("lean", "base"):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            if node.func.id == "getattr" and set(args) & {"lean", "grouped", "base"}:
                found.append((node.lineno, f"getattr(..., {args[0]!r})"))
            named = {n.id for a in node.args[1:2] for n in ast.walk(a) if isinstance(n, ast.Name)}
            if node.func.id == "isinstance" and named & KINDS:
                found.append((node.lineno, f"isinstance(..., {sorted(named & KINDS)})"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            key = [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
            if getattr(owner, "attr", None) == "meta" and key == ["grouped"]:
                found.append((node.lineno, 'meta.get("grouped")'))
        elif (
            isinstance(node, ast.Subscript)
            and getattr(node.value, "attr", None) == "meta"
            and getattr(node.slice, "value", None) == "grouped"
        ):
            found.append((node.lineno, 'meta["grouped"]'))
    return found


def test_readers_never_ask_how_a_layer_is_stored() -> None:
    """A layer is full, lean or grouped behind one interface (attnviz.engine.layer): views, ui,
    serve and measures ask it what they need (holds_maps, in_bands, has, head_map, pooled, ...)
    and a trace its `unit`, never which kind it is; nothing outside the layer classes' own
    modules reads their stored slots."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in LAYER_MODULES:
            continue
        reader = rel.split("/")[0] in READERS
        for line, what in kind_tests(ast.parse(path.read_text(encoding="utf-8"))):
            if reader or "_stored_" in what:
                found.append(f"{rel}:{line} {what}")
    assert not found
    planted = "a = layer.lean or getattr(lt, 'base', None)\nb = t.meta.get('grouped')\n"
    planted += "c = x.__dict__['_stored_mask']\nd = isinstance(m, MaskRule)\n"
    assert len(kind_tests(ast.parse(planted))) == 5  # the check itself sees each kind of test


if __name__ == "__main__":
    print(summary())
