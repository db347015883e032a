"""The architecture as the README draws it: which package may import which, and where
Horovod is imported. Read from the source (ast), so a violation fails before any code runs."""

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "bert_tf"
# What each subpackage may import from bert_tf (besides itself and the top-level module).
ALLOWED = {
    "data": set(),
    "model": set(),
    "train": {"data", "model"},
    "analysis": {"data", "model"},
    "tools": {"data", "model", "train", "analysis"},
}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def subpackage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "bert_tf" and parts[1] in ALLOWED else None


def test_subpackages_import_only_downwards():
    problems = []
    for package, allowed in ALLOWED.items():
        for path in sorted((PACKAGE / package).glob("*.py")):
            for module in imports_of(path):
                target = subpackage_of(module)
                if target and target != package and target not in allowed:
                    problems.append(f"{path.relative_to(REPO)} imports {module}")
    assert not problems, problems


def test_only_the_training_package_imports_horovod():
    users = [str(path.relative_to(REPO)) for path in sorted(PACKAGE.rglob("*.py"))
             if any(m == "horovod" or m.startswith("horovod.") for m in imports_of(path))]
    assert users == ["bert_tf/train/distributed.py"]


def test_every_module_lives_in_a_subpackage():
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top_level == ["__init__.py", "__main__.py"]
