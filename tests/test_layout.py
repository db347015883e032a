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


# Commands with their own shape: convert's sub-command comes before its flags (its main()
# parses them itself).
OWN_COMMAND_LINE = {"convert"}


def test_every_command_turns_its_flags_into_a_dataclass_with_run_command():
    """`python -m bert_tf COMMAND` modules end in bert_tf.run_command(define_flags, Config, run):
    flags defined when run as a program (not at import), parsed into a dataclass, and library
    functions that take it."""
    from bert_tf.__main__ import COMMANDS

    problems = []
    for command, (module, _) in COMMANDS.items():
        if command in OWN_COMMAND_LINE:
            continue
        path = REPO / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(), str(path))
        main_blocks = [node for node in tree.body if isinstance(node, ast.If)
                       and ast.unparse(node.test) == "__name__ == '__main__'"]
        calls = [ast.unparse(node.func) for block in main_blocks for node in ast.walk(block)
                 if isinstance(node, ast.Call)]
        if calls != ["bert_tf.run_command"]:
            problems.append(f"{command}: __main__ block calls {calls}")
        top_level_calls = [ast.unparse(node.value.func) for node in tree.body
                           if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
        if any(call.startswith("flags.") for call in top_level_calls):
            problems.append(f"{command}: defines flags at import")
    assert not problems, problems


def test_config_from_flags_reads_each_field_from_the_flag_of_its_name():
    import dataclasses

    from absl import flags

    import bert_tf

    @dataclasses.dataclass
    class Config:
        vocab_file: str
        top_k: int = 5
        text: list | None = None

    values = flags.FlagValues()
    flags.DEFINE_string("vocab_file", None, "", flag_values=values)
    flags.DEFINE_integer("top_k", 5, "", flag_values=values)
    values(["prog", "--vocab_file=v.txt", "--top_k=3"])
    assert bert_tf.config_from_flags(Config, values, text=["a [MASK]"]) == Config(
        vocab_file="v.txt", top_k=3, text=["a [MASK]"])
