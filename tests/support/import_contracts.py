"""A contract type of our own for import-linter (pyproject's ``contract_types``).

``third_party_allowlist``: the listed packages may import the standard library, their own
project's packages and only the third-party packages named in ``allowed``. import-linter's
``forbidden`` contract needs every unwanted package named, so a new dependency would slip
through it; this one names what is allowed instead.
"""

from __future__ import annotations

import sys
from typing import Any

from importlinter import Contract, ContractCheck, fields, output

STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


class ThirdPartyAllowList(Contract):
    type_name = "third_party_allowlist"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed = fields.ListField(subfield=fields.StringField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        allowed = set(self.allowed)  # type: ignore[call-overload]
        broken: list[dict[str, Any]] = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            modules = {source.name} | set(graph.find_descendants(source.name))
            for importer in sorted(modules):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    top = imported.split(".")[0]
                    if top in STDLIB or top in allowed or not graph.is_module_squashed(top):
                        continue  # the standard library, allowed, or one of ours
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = sorted(d["line_number"] for d in details)
                    broken.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        allowed = ", ".join(sorted(self.allowed)) or "none"  # type: ignore[call-overload]
        output.print_error(f"Third-party imports outside the allow-list ({allowed}):", bold=False)
        output.new_line()
        for b in check.metadata["broken"]:
            where = ", ".join(map(str, b["lines"]))
            output.print_error(f"- {b['importer']} -> {b['imported']} (l.{where})", bold=False)
        output.new_line()
