"""The `reference` solution: a definition's own reference code, run as a solution.

Useful as a sanity row in a report (it must pass everywhere with zero error) and as the timing baseline
that other solutions' speedups are measured against.
"""

from __future__ import annotations

from ..reference import check_reference_source, compile_reference
from ..schema import Definition


class ReferenceSolution:
    """Runs the definition's reference; refuses unsafe references unless trust_code."""

    name = "reference"

    def __init__(self, trust_code: bool = False):
        self.trust_code = trust_code

    def supports(self, definition: Definition) -> str | None:
        if not self.trust_code and check_reference_source(definition.reference, definition.name):
            return "the reference is refused without --trust-code"
        return None

    def build(self, definition: Definition, device: str):
        return compile_reference(definition.reference, definition.name, self.trust_code)
