"""The harness's sub-packages depend downward only, read from the source with
`ast` (nothing is imported):

    core < ladder, patches < cluster < experiment < scenarios | bench < upstream < cli

so a benchmark never needs a scenario, and the model of the ladder never
needs Docker. Function-local imports count: a lazy import is still a
dependency. The code that runs inside the containers (cluster/apps/ and
cluster/agent/) imports nothing of the harness but itself, and outside
it only the standard library and what a Ray Serve install brings.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "harness"

BELOW_SCENARIOS = {"core", "ladder", "cluster", "experiment"}
# Layer -> the layers it may import (its own included).
ALLOWED = {
    "core": {"core"},
    "ladder": {"core", "ladder"},
    "patches": {"core", "patches"},
    "cluster": {"core", "patches", "cluster"},
    "experiment": {"core", "ladder", "cluster", "experiment"},
    "scenarios": BELOW_SCENARIOS | {"scenarios"},
    "bench": BELOW_SCENARIOS | {"bench"},
    "upstream": {"core", "ladder", "patches", "cluster", "experiment"}
    | {"scenarios", "bench", "upstream"},
    "cli": {"core", "ladder", "patches", "cluster", "experiment"}
    | {"scenarios", "bench", "upstream", "cli"},
}
# Modules directly in harness/: the command line and its entry point are the
# top layer; the package's own __init__ is loaded with every module, so it is
# held to core's rule.
TOP_LEVEL = {"cli": "cli", "__main__": "cli", "__init__": "core"}

# In the containers: Ray, and what Ray Serve installs with it (its HTTP stack).
IN_CONTAINER_PACKAGES = {"ray", "starlette", "fastapi"}
IN_CONTAINER = ("harness.cluster.apps", "harness.cluster.agent")


def module_name(path: str) -> str:
    """harness/cluster/apps/echo.py -> harness.cluster.apps.echo."""
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """The sub-package a harness module belongs to: harness.bench.soak -> bench."""
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LEVEL["__init__"]
    if parts[1] in TOP_LEVEL:
        return TOP_LEVEL[parts[1]]
    return parts[1]


def imported(path: str, source: str) -> list[tuple[int, str, str]]:
    """(line, module imported, the statement) for every import anywhere in
    the source, relative ones resolved against the module's package."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines()
    module = module_name(path)
    package = module if Path(path).name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        statement = lines[node.lineno - 1].strip() if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, statement) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == PACKAGE:
                # `from harness import scenarios`: each name is a sub-package or module.
                found += [(node.lineno, f"{PACKAGE}.{a.name}", statement) for a in node.names]
            else:
                found.append((node.lineno, target, statement))
    return sorted(found)


def violations(path: str, source: str) -> list[str]:
    """Every import in `source` (the text of `path`, relative to the
    repository) that the layering forbids, as `path:line: statement: why`."""
    module = module_name(path)
    layer = layer_of(module)
    if layer not in ALLOWED:
        return [f"{path}: {layer}/ is a sub-package the layer table does not know; add it"]
    in_container = module.startswith(IN_CONTAINER)
    out = []
    for line, target, statement in imported(path, source):
        top = target.split(".")[0]
        where = f"{path}:{line}: `{statement}`"
        if in_container:
            own = target.startswith(IN_CONTAINER)
            if top == PACKAGE and not own:
                out.append(f"{where}: code that runs in a container imports no harness module")
            elif top != PACKAGE and top not in sys.stdlib_module_names | IN_CONTAINER_PACKAGES:
                out.append(
                    f"{where}: code that runs in a container imports only the standard "
                    f"library and {', '.join(sorted(IN_CONTAINER_PACKAGES))}"
                )
            continue
        if top != PACKAGE or target == PACKAGE:
            continue
        to = layer_of(target)
        if to not in ALLOWED[layer]:
            out.append(
                f"{where}: {layer} may import only {', '.join(sorted(ALLOWED[layer]))}, not {to}"
            )
    return out


def sources() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def test_every_module_of_the_harness_imports_only_downward():
    found = []
    for file in sources():
        path = file.relative_to(ROOT).as_posix()
        found += violations(path, file.read_text())
    assert not found, "imports against the layering:\n" + "\n".join(found)


def test_every_sub_package_has_a_place_in_the_table():
    layers = {layer_of(module_name(f.relative_to(ROOT).as_posix())) for f in sources()}
    assert layers <= set(ALLOWED), layers - set(ALLOWED)


@pytest.mark.parametrize(
    "path, source, forbidden",
    [
        ("harness/core/x.py", "from harness.scenarios import SCENARIOS", "not scenarios"),
        ("harness/core/x.py", "import harness.cluster.engine", "not cluster"),
        ("harness/core/x.py", "from harness import experiment", "not experiment"),
        ("harness/ladder/x.py", "from ..experiment import nemesis", "not experiment"),
        ("harness/upstream/x.py", "from harness.cli import main", "not cli"),
        ("harness/__init__.py", "from harness.cli import main", "not cli"),
        ("harness/cluster/apps/x.py", "from harness.core import paths", "no harness module"),
        ("harness/cluster/agent/state.py", "import docker", "only the standard library"),
    ],
)
def test_the_checker_catches_an_upward_import(path, source, forbidden):
    (found,) = violations(path, f"import json\n\n{source}\n")
    assert found.startswith(f"{path}:3: `{source}`: ")
    assert forbidden in found


def test_a_function_local_import_counts_too():
    source = "import json\n\n\ndef f():\n    from harness.scenarios import base\n"
    assert violations("harness/bench/x.py", source) == [
        "harness/bench/x.py:5: `from harness.scenarios import base`: bench may import only "
        "bench, cluster, core, experiment, ladder, not scenarios"
    ]


@pytest.mark.parametrize(
    "path, source",
    [
        ("harness/scenarios/x.py", "from harness.experiment import report\nimport asyncio\n"),
        ("harness/cli.py", "from harness.upstream import upstream\n"),
        ("harness/cluster/apps/x.py", "from harness.cluster.apps.echo import a\nimport ray\n"),
        ("harness/cluster/agent/state.py", "def f():\n    import http.client\n"),
    ],
)
def test_the_checker_lets_a_downward_import_pass(path, source):
    assert violations(path, source) == []


# The existing-cluster backend reaches a user's cluster only through Ray's
# remote interfaces and the cluster file's commands: none of its modules, nor
# any harness module they import, may import docker-py or the Docker cluster.
EXISTING_BACKEND = ("harness.cluster.existing", "harness.cluster.clusterfile")
DOCKER = ("docker", "harness.cluster.engine", "harness.cluster.cluster", "harness.cluster.images")


def _modules_named(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, absolute, and for
    `from PACKAGE import NAME` also PACKAGE.NAME (NAME may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_the_existing_cluster_backend_never_reaches_docker():
    seen, todo, reached = set(), list(EXISTING_BACKEND), []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / module.replace(".", "/") / "__init__.py"
        if not path.exists():
            continue  # the standard library, Ray, or a name that is not a module
        for line, target in _modules_named(path):
            if target.split(".")[0] == "docker" or target in DOCKER:
                reached.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
            if target.startswith(f"{PACKAGE}."):
                todo.append(target)
    assert not reached, "\n".join(reached)
    assert "harness.cluster.boundary" in seen  # the walk followed the imports
