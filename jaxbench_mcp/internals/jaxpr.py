"""jax's names for the parameters of the primitives that the analyses walk.

A jaxpr equation keeps its sub-programs and settings in `eqn.params`, under names private to jax: where a call,
a loop or a branch keeps its body, a scan's trip count, unrolling and operand split, the tree of a ref read's
transforms, a convert's target dtype, the shardings a replay drops. They are read here only. The parameters of
plain lax operations (shape, broadcast_dimensions, dimension_numbers, start_indices, ...) are read where they
are used: they are the documented keyword arguments of the lax functions that bind them.

Checked against jax 0.12.0.1: tests/test_internals_jaxpr.py holds a canary per assumption.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jax is imported where it is used: the parent process never loads it
    from jax.extend.core import Jaxpr, JaxprEqn

# The primitives of plain calls (jax.jit, custom_jvp / custom_vjp / custom_vmap functions), whose body runs once
# where the call stands, and the parameter that holds it.
_CALL_BODY = {
    "jit": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vmap_call": "call",
}
# Parameters that pin an equation's operands or results to devices.
_SHARDING_PARAMS = ("sharding", "out_sharding")


def call_body(eqn: JaxprEqn) -> Jaxpr | None:
    """The body of a plain call (jax.jit, custom_jvp / custom_vjp / custom_vmap), with its consts (`.jaxpr`,
    `.consts`); None for any other equation."""
    param = _CALL_BODY.get(eqn.primitive.name)
    return eqn.params.get(param) if param else None


def sub_jaxprs(eqn: JaxprEqn) -> Iterator[Jaxpr]:
    """Every jaxpr an equation holds in its parameters (bodies, branches, kernels), each as an open jaxpr."""
    for param in eqn.params.values():
        for sub in param if isinstance(param, (list, tuple)) else [param]:
            inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)
            if hasattr(inner, "eqns"):
                yield inner


@dataclass(frozen=True)
class Scan:
    body: Jaxpr  # with its consts (.jaxpr, .consts); takes consts, then the carry, then one slice of each xs
    length: int  # trips
    unroll: int | bool  # body copies per rolled iteration; True: fully unrolled


def scan_info(eqn: JaxprEqn) -> Scan:
    """A scan's body, trip count and unrolling."""
    p = eqn.params
    return Scan(body=p["jaxpr"], length=p["length"], unroll=p.get("unroll", 1))


def scan_parts(eqn: JaxprEqn, values: Sequence) -> tuple[list, list, list]:
    """A scan's operands (or anything laid out like them) split into (consts, carry, xs)."""
    consts, carry, xs = eqn.params["ft_in"].update(list(values)).unpack()
    return list(consts), list(carry), list(xs)


def cond_branches(eqn: JaxprEqn) -> Sequence[Jaxpr]:
    """A cond's branches (each with its consts), in the order of the index operand."""
    return eqn.params["branches"]


@dataclass(frozen=True)
class While:
    cond: Jaxpr  # with its consts; takes cond_nconsts consts, then the carry
    body: Jaxpr  # with its consts; takes body_nconsts consts, then the carry
    cond_nconsts: int
    body_nconsts: int  # the operands are: cond consts, body consts, carry


def while_info(eqn: JaxprEqn) -> While:
    """A while loop's condition and body, and how its operands split between them."""
    p = eqn.params
    return While(p["cond_jaxpr"], p["body_jaxpr"], p["cond_nconsts"], p["body_nconsts"])


def ref_transforms_tree(eqn: JaxprEqn) -> Any:
    """The pytree of a state get / swap's ref transforms (indexers, views), flattened into its operands after
    the ref (after the ref and the stored value, for swap)."""
    return eqn.params["tree"]


def convert_dtype(eqn: JaxprEqn) -> Any:
    """The dtype a convert_element_type converts to."""
    return eqn.params["new_dtype"]


def unsharded_params(eqn: JaxprEqn) -> dict:
    """An equation's parameters without the shardings it was traced with (to bind it again on one CPU)."""
    return {k: None if k in _SHARDING_PARAMS else v for k, v in eqn.params.items()}


# The kernel primitives that take the interpret-mode switch as a parameter (chosen when pallas_call / core_map is
# traced, from the force_tpu_interpret_mode context): a recorded program is interpreted by rewriting it.
_INTERPRET_PARAM = {"pallas_call": "interpret", "core_map": "interpret", "mpmd_map": "interpret"}


def with_interpret(closed: Any, params: Any) -> Any:
    """A copy of a recorded program (ClosedJaxpr) whose kernels, at any depth, run with interpret=`params`."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    def rewrite_value(value):
        if isinstance(value, ClosedJaxpr):
            return ClosedJaxpr(rewrite(value.jaxpr), value.consts)
        if isinstance(value, Jaxpr):
            return rewrite(value)
        if isinstance(value, tuple) and any(isinstance(v, (ClosedJaxpr, Jaxpr)) for v in value):
            return tuple(rewrite_value(v) for v in value)
        return value

    def rewrite(jaxpr):
        eqns = []
        for eqn in jaxpr.eqns:
            switch = _INTERPRET_PARAM.get(eqn.primitive.name)
            if switch is not None:
                if switch not in eqn.params:
                    raise RuntimeError(f"jax's {eqn.primitive.name} has no '{switch}' parameter any more")
                eqns.append(eqn.replace(params={**eqn.params, switch: params}))
            else:
                eqns.append(eqn.replace(params={k: rewrite_value(v) for k, v in eqn.params.items()}))
        return jaxpr.replace(eqns=eqns)

    return ClosedJaxpr(rewrite(closed.jaxpr), closed.consts)
