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

import jax
from jax.core import ShapedArray
from jax.extend.core import ClosedJaxpr, Literal

if TYPE_CHECKING:  # jax is imported where it is used: importing this module does not load it
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
            if inner is not None and hasattr(inner, "eqns"):
                yield inner


def walk_eqns(jaxpr: Jaxpr) -> Iterator[JaxprEqn]:
    """Every equation of `jaxpr` and, after each, those of the jaxprs it holds (sub_jaxprs), depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from walk_eqns(sub)


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
# traced, from the force_tpu_interpret_mode context): a recorded program is interpreted by binding them again.
_INTERPRET_PARAM = {"pallas_call": "interpret", "core_map": "interpret", "mpmd_map": "interpret"}


def _holds_kernel(jaxpr: Jaxpr, memo: dict[int, tuple[Jaxpr, bool]]) -> bool:
    """Whether a kernel sits in `jaxpr` at any depth; `memo` answers each nested body once, however often
    evaluation meets it (keyed by id, holding the jaxpr so that the id stays its own)."""
    if id(jaxpr) not in memo:
        holds = any(
            eqn.primitive.name in _INTERPRET_PARAM or any(_holds_kernel(s, memo) for s in sub_jaxprs(eqn))
            for eqn in jaxpr.eqns
        )
        memo[id(jaxpr)] = (jaxpr, holds)
    return memo[id(jaxpr)][1]


def interpreting(closed: Any, params: Any):
    """A function that evaluates a recorded program (a ClosedJaxpr) with its kernels, at any depth, run with
    interpret=`params`. Plain calls holding a kernel are inlined; loops and branches holding one get bodies traced
    anew (interpret mode gives a kernel effects of its own, which their recorded bodies do not declare)."""
    memo: dict[int, tuple[Jaxpr, bool]] = {}

    def evaluate(jaxpr: Jaxpr, consts, *args):
        env = dict(zip(jaxpr.constvars, consts, strict=True)) | dict(zip(jaxpr.invars, args, strict=True))

        def read(v):
            return v.val if isinstance(v, Literal) else env[v]

        for eqn in jaxpr.eqns:
            inputs = [read(v) for v in eqn.invars]
            name = eqn.primitive.name
            switch = _INTERPRET_PARAM.get(name)
            if switch is not None:
                if switch not in eqn.params:
                    raise RuntimeError(f"jax's {name} has no '{switch}' parameter any more")
                bound = {**eqn.params, switch: params}
                if "out_avals" in bound:  # a recorded aval keeps the mesh it was traced under (see retraced)
                    bound["out_avals"] = tuple(
                        ShapedArray(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))
                        for a in bound["out_avals"]
                    )
            elif not any(_holds_kernel(sub, memo) for sub in sub_jaxprs(eqn)):
                # Without the shardings it was traced with: a body traced anew below runs under a mesh context
                # of its own, which a recorded sharding need not match (25k's solution failed so).
                bound = unsharded_params(eqn)
            elif (body := call_body(eqn)) is not None:
                env.update(zip(eqn.outvars, evaluate(body.jaxpr, body.consts, *inputs), strict=True))
                continue
            else:
                bound = {k: retraced(v) for k, v in eqn.params.items()}
            out = eqn.primitive.bind(*inputs, **bound)
            env.update(zip(eqn.outvars, out if eqn.primitive.multiple_results else [out], strict=True))
        return [read(v) for v in jaxpr.outvars]

    def retraced(value):
        if isinstance(value, ClosedJaxpr) and _holds_kernel(value.jaxpr, memo):
            # Shapes and dtypes only: a recorded aval keeps the mesh it was traced under, which the mesh context of
            # this run need not match.
            avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in value.jaxpr.invars]
            return jax.make_jaxpr(lambda *a: evaluate(value.jaxpr, value.consts, *a))(*avals)
        if isinstance(value, tuple) and any(isinstance(v, ClosedJaxpr) for v in value):
            return tuple(retraced(v) for v in value)
        return value

    return lambda *args: evaluate(closed.jaxpr, closed.consts, *args)
