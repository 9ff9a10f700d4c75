"""The layout of the package (docs of `posattn.papers`): tools never import a study, matplotlib or the
drills; the library imports no test helper; no import circles among posattn's modules; tests import no
benchmark or drill."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
STUDIES_AND_FIGURES = ("posattn.papers", "posattn.plots")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted((ROOT / "posattn").rglob("*.py"))}
TOOLS = sorted(m for m in MODULES if not m.startswith(STUDIES_AND_FIGURES))


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Every module `name` imports, at module level or inside a function (`from p import m` counts as
    p.m where p.m is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package that holds `name`
                package = name.split(".")[
                    : len(name.split(".")) - node.level + (path.name == "__init__.py")
                ]
                base = ".".join(package + ([node.module] if node.module else []))
            found.update(
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            )
    return found


def _inside(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_tools_import_no_study_no_figure_and_no_matplotlib_even_inside_functions():
    offending = {
        m: sorted(
            i
            for i in _imports(m, MODULES[m])
            if _inside(i, (*STUDIES_AND_FIGURES, "matplotlib", "benchmarks", "drills"))
        )
        for m in TOOLS
    }
    assert not {m: i for m, i in offending.items() if i}


def test_the_library_imports_no_test_helper_drill_or_benchmark():
    """What only the tests and drills need (the faults they inject: tests/vision/fault_injection.py,
    tests/theory/fault_injection.py) lives beside them, not in posattn."""
    offending = {
        m: sorted(i for i in _imports(m, p) if _inside(i, ("tests", "drills", "benchmarks")))
        for m, p in MODULES.items()
    }
    assert not {m: i for m, i in offending.items() if i}


def test_importing_every_tool_loads_neither_matplotlib_nor_a_study():
    code = (
        "import importlib, sys\n"
        f"for m in {TOOLS!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib' or m.startswith('posattn.papers')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


TOOL_PACKAGES = ("posattn.theory", "posattn.vision", "posattn.shallow", "posattn.analysis")


def test_the_tool_packages_import_no_command_line_and_define_no_flag():
    """A researcher's `import posattn.theory` (or any module of the four tool packages) loads neither the
    binaries' plumbing (posattn.cli, which defines flags, nor posattn.ownership) nor defines an absl flag
    of ours: config schemas load through posattn.configs, which needs only ml_collections."""
    tools = [m for m in TOOLS if _inside(m, TOOL_PACKAGES)]
    code = (
        "import importlib, sys\n"
        "from absl import flags\n"
        f"for m in {tools!r}: importlib.import_module(m)\n"
        "ours = [f for mod, fs in flags.FLAGS.flags_by_module_dict().items() if 'posattn' in mod for f in fs]\n"
        "print(sorted(m for m in ('posattn.cli', 'posattn.ownership') if m in sys.modules), len(ours))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[] 0", out.stdout


def test_posattn_modules_import_each_other_without_a_circle():
    graph = {m: {i for i in _imports(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                raise AssertionError("import circle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n not in state:
                visit(n)
        state[m] = "done"
        path.pop()

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_test_imports_a_benchmark_or_a_drill():
    offending = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found = {
            i for i in _imports(_module_name(path), path) if _inside(i, ("benchmarks", "drills"))
        }
        if found:
            offending[str(path.relative_to(ROOT))] = sorted(found)
    assert not offending


MAX_MODULE_LINES = 400  # issue 47 item 7: one job a module, none over 400 lines


def test_every_module_of_posattn_and_experiments_is_at_most_400_lines():
    paths = sorted([*(ROOT / "posattn").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")])
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in paths}
    assert not {p: n for p, n in lines.items() if n > MAX_MODULE_LINES}


# Names a checked config goes by (a config's section included); `.get` on one would be a second default.
CONFIG_NAMES = ("config", "c", "cfg", "aug_cfg", "model_cfg", "opt", "opts")
# A `.get` on a dict of that name that is not one of our configs: timm's hub config.json.
NOT_OUR_CONFIGS = {"posattn/vision/timm_heads.py"}


def test_no_module_reads_a_config_field_with_a_default_of_its_own():
    """Issue 47 item 3: a field's default lives in its schema alone. A config is checked against its
    schema (which fills every field) before it is read, and an older run's record is completed from the
    schema (`vision.config.complete`), so `config.get(field, default)` would be a second default."""
    found = []
    paths = sorted([*(ROOT / "posattn").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")])
    for path in paths:
        where = str(path.relative_to(ROOT))
        if where in NOT_OUR_CONFIGS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in CONFIG_NAMES
            ):
                found.append(f"{where}:{node.lineno}")
    assert not found


def test_the_run_record_and_the_metrics_have_one_writer_each():
    """Issue 47 item 4: config.json and run.json are named, written and read in `posattn.run_record`
    alone (timm_heads reads timm's own config.json), and metrics.jsonl in `posattn.metric_log` alone,
    which appends to it through `posattn.chunked_log`, the only module that appends (where the store
    can: issue 49 item 5)."""
    owners = {
        "config.json": ("posattn/run_record.py", *NOT_OUR_CONFIGS),
        "run.json": ("posattn/run_record.py",),
        "metrics.jsonl": ("posattn/metric_log.py",),
    }
    named, appended = [], []
    for path in sorted([*(ROOT / "posattn").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")]):
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if (
                isinstance(node, ast.Constant)
                and node.value in owners
                and where not in owners[node.value]
            ):
                named.append(f"{where}:{node.lineno}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "append_jsonl"
                and where not in ("posattn/chunked_log.py", "posattn/io.py")
            ):
                appended.append(f"{where}:{node.lineno}")
    assert not named and not appended
