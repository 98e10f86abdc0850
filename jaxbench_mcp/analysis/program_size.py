"""How large a traced program is once its nested calls are inlined, before anything lowers or compiles it.

A jaxpr names a function once however often it is called: a candidate whose function calls the one below it twice,
forty levels deep, traces in milliseconds into a jaxpr of ~80 equations, while XLA, which inlines calls, would
compile 2^40 copies of the innermost one (and runs out of time or memory without saying why). Counting each
equation once per path that reaches it tells the two apart: the count is the size of the program XLA would build.

What is counted, per path: every equation, plus whatever its sub-programs hold (a call's callee, every branch of
a `cond`, a loop's body and condition once, a Pallas kernel's body, a custom derivative's primal). Loops count their
body once (it is compiled once, not unrolled); trip counts are the work's business, not the program's size.
Each distinct sub-jaxpr is counted once and its total reused, so the count costs time linear in the jaxpr.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jax.extend import core

# Far above any real kernel (the 50 solutions stay below ~10^4 once inlined) and far below what XLA can compile
# in a stage's time.
DEFAULT_LIMIT = 1_000_000


def _sub_jaxprs(value: Any) -> Iterator[Any]:
    """The jaxprs held by one equation parameter (a Jaxpr, a ClosedJaxpr, or a tuple/list of them)."""
    if isinstance(value, core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _sub_jaxprs(item)


def inlined_equations(closed: Any) -> int:
    """The number of equations of `closed` (a ClosedJaxpr or a Jaxpr) with every nested call inlined."""
    top = closed.jaxpr if isinstance(closed, core.ClosedJaxpr) else closed
    totals: dict[int, int] = {}
    keep_alive: list[Any] = []  # ids stay unique while the walk holds every jaxpr it has counted

    def count(jaxpr: Any) -> int:
        key = id(jaxpr)
        if key in totals:
            return totals[key]
        keep_alive.append(jaxpr)
        total = 0
        for eqn in jaxpr.eqns:
            total += 1
            for param in eqn.params.values():
                for sub in _sub_jaxprs(param):
                    total += count(sub)
        totals[key] = total
        return total

    # Recursion is as deep as the calls are nested, and tracing that nesting took many more Python frames per level.
    return count(top)


def program_too_large(closed: Any, limit: int = DEFAULT_LIMIT) -> str | None:
    """Why the traced program is too large to lower and compile (its message for the verdict), or None."""
    n = inlined_equations(closed)
    if n <= limit:
        return None
    return (
        f"program too large: {n:,} operations once its nested calls are inlined (XLA inlines every call), "
        f"above the limit of {limit:,}; the trace itself is small because it names each function once. A "
        "function that calls another several times, nested many levels deep, multiplies: loop with "
        "lax.fori_loop or lax.scan instead of calling or unrolling, and keep Python recursion out of traced code"
    )
