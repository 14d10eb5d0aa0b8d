"""An import-linter contract: no import cycle between any two modules of a package.

import-linter's own ``acyclic_siblings`` looks at siblings with their descendants
squashed, so a package and one of its own modules (``app.limits.address`` and
``app.backends.sqlite.counters``) may still import each other. This one looks at every
module, and, like every import-linter contract, at the imports inside functions too.
"""

from __future__ import annotations

from importlinter.application import contract_utils, output
from importlinter.application.contract_utils import AlertLevel
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

#: Most cycles a failed check shows; each is shown whole.
MAX_CYCLES_SHOWN = 10


class NoCyclesContract(Contract):
    """Every strongly connected set of modules of more than one is a broken contract."""

    type_name = "no_cycles"

    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)

    def check(self, graph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=AlertLevel.ERROR,  # a stale exception must go
        )
        imports = {
            module: sorted(graph.find_modules_directly_imported_by(module))
            for module in sorted(graph.modules)
        }
        cycles = [sorted(group) for group in strongly_connected(imports) if len(group) > 1]
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"][:MAX_CYCLES_SHOWN]:
            output.print_error(f"These modules import each other: {', '.join(cycle)}")
            output.new_line()


def strongly_connected(imports: dict[str, list[str]]) -> list[set[str]]:
    """Return the strongly connected groups of the graph ``imports`` (module -> imported).

    Tarjan's algorithm, without recursion, so a long chain of imports cannot overflow.
    """
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in imports:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            module, next_child = work.pop()
            if next_child == 0:
                index[module] = lowest[module] = len(index)
                stack.append(module)
                on_stack.add(module)
            children = imports.get(module, [])
            if next_child < len(children):
                work.append((module, next_child + 1))
                child = children[next_child]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    lowest[module] = min(lowest[module], index[child])
                continue
            for child in children:  # every child is done: take their lowest
                if child in on_stack:
                    lowest[module] = min(lowest[module], lowest[child])
            if lowest[module] == index[module]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == module:
                        break
                groups.append(group)
    return groups
