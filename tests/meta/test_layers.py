"""The layers of docs/architecture.md hold, and no two modules import each other (make lint)."""

from __future__ import annotations

import subprocess
import sys

import grimp
import pytest

from tests.helpers.import_cycles import NoCyclesContract, strongly_connected
from tests.helpers.tools import ROOT

LINT_IMPORTS = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]


@pytest.mark.processes
def test_the_layers_and_no_cycles_contracts_are_kept():
    result = subprocess.run(
        [*LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("imports", "groups"),
    [
        ({"a": ["b"], "b": ["c"], "c": []}, []),
        ({"a": ["b"], "b": ["a"]}, [{"a", "b"}]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}, [{"a", "b", "c"}]),
        ({"a": ["b", "d"], "b": ["a"], "d": ["e"], "e": ["d"]}, [{"a", "b"}, {"d", "e"}]),
        ({f"m{i}": [f"m{i + 1}"] for i in range(5000)} | {"m5000": ["m0"]}, None),
    ],
)
def test_strongly_connected_groups_are_the_cycles(imports, groups):
    found = [group for group in strongly_connected(imports) if len(group) > 1]
    if groups is None:  # a cycle through 5,001 modules: no recursion to overflow
        assert [len(group) for group in found] == [5001]
    else:
        assert sorted(map(sorted, found)) == sorted(map(sorted, groups))


def contract(**options) -> NoCyclesContract:
    return NoCyclesContract(name="no cycles", session_options={}, contract_options=options)


def graph_of(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="")
    return graph


def test_a_cycle_through_a_package_and_its_module_breaks_the_contract():
    graph = graph_of(("p.sub", "p"), ("p", "p.sub"), ("p", "q"))
    check = contract().check(graph, verbose=False)
    assert not check.kept
    assert check.metadata["cycles"] == [["p", "p.sub"]]


def test_an_ignored_import_breaks_the_cycle_and_a_stale_one_is_an_error():
    graph = graph_of(("p.sub", "p"), ("p", "p.sub"))
    assert contract(ignore_imports=["p.sub -> p"]).check(graph, verbose=False).kept
    with pytest.raises(Exception, match="No matches for ignored import"):
        contract(ignore_imports=["p.sub -> q"]).check(graph_of(("p", "p.sub")), verbose=False)
