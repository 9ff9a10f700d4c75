"""Write docs/api.md, the API reference of `posattn`, from the docstrings; `--check` fails (status 1)
when the committed file differs from what the code gives, so the reference cannot go stale.

    python .ci/api_reference.py           # rewrite docs/api.md
    python .ci/api_reference.py --check   # CI: is docs/api.md up to date?

Every module of the package in name order: its docstring, then each public class and function that
the module defines (not those it imports), with its signature and docstring. The file's last section,
"What is checked" (what each public entry point validates and what it assumes), is written by hand:
the generator keeps it as it is, and `--check` compares only the generated part.
"""

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"
CHECKED = "\n## What is checked\n"  # the hand-written last section
# Mapped in from the repository's experiments/ and tpu_configs/ folders when installed (setup.py):
# binaries and config files, documented by their own --help and docstrings.
SKIP = ("posattn.experiments", "posattn.tpu_configs")


def _modules() -> list:
    sys.path.insert(0, str(ROOT))
    import posattn

    names = ["posattn"] + [m.name for m in pkgutil.walk_packages(posattn.__path__, "posattn.")]
    return [importlib.import_module(n) for n in sorted(names) if not n.startswith(SKIP)]


def _signature(obj) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # reprs of default functions carry addresses


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else "(no docstring)"


def _members(module) -> list:
    found = []
    for name, obj in vars(module).items():
        obj = (
            inspect.unwrap(obj) if callable(obj) else obj
        )  # a jitted function: the function it compiles
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            found.append((name, obj))
    return sorted(found)


def reference() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python .ci/api_reference.py`; do not edit by hand, except the",
        "last section, [What is checked](#what-is-checked), which the generator keeps.",
        "",
    ]
    for module in _modules():
        lines += [f"## `{module.__name__}`", "", _doc(module), ""]
        for name, obj in _members(module):
            kind = "class" if inspect.isclass(obj) else "def"
            lines += [f"### `{kind} {name}{_signature(obj)}`", "", _doc(obj), ""]
    return "\n".join(lines).rstrip() + "\n"


def _split(text: str) -> tuple[str, str]:
    """(generated part, hand-written "What is checked" section or "")."""
    at = text.find(CHECKED)
    return (text, "") if at < 0 else (text[:at], text[at:])


def main(argv) -> int:
    text = reference()
    generated, checked = _split(OUT.read_text()) if OUT.exists() else ("", "")
    if "--check" in argv:
        if generated != text or not checked:
            print(
                f"{OUT.relative_to(ROOT)} is stale (or has no 'What is checked' section): run python "
                ".ci/api_reference.py and commit it"
            )
            return 1
        return 0
    text += checked
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
