"""XLA's optimised HLO text, read for the work a compiled TPU program does around its Pallas kernels.

The static estimate charges XLA's share of a candidate (the ops outside its Pallas kernels) from the program
that is really compiled, not from a rewrite of it: bitcasts, layout-free reshapes, tuples and parameters cost
nothing there, a copy the program makes (an output returned twice, a relayout) costs its bytes, and buffers
that XLA placed in VMEM (memory space S(1)) move no HBM bytes. Each remaining instruction of the entry
computation (a while loop's body times its known trip count) is costed by its own roofline from its FLOPs
(matmuls and convolutions inside fusions) and the HBM bytes of its operands and result.

Text format as printed by jax's `compiled.as_text()` (checked against jax 0.8 / libtpu 0.0.52).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

# A computation's header; jax's lowered (unoptimised) text drops the % and the signature: "ENTRY main.3 {".
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+)(?: \(.*\) -> .*)? \{\s*$")
# The start of an instruction's line (a line that does not start one continues the instruction before it).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = ")
_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "s4": 0.5,
    "u4": 0.5,
    "s2": 0.25,
    "u2": 0.25,
}
_ARRAY = re.compile(r"([a-z]\w*)\[([\d,]*)\](\{[^}]*\})?")
# Instructions that move or compute nothing at run time.
_FREE = {
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "copy-done",
    "after-all",
    "opt-barrier",
    "partition-id",
    "replica-id",
    "add-dependency",
    "domain",
    "async-done",
    "iota",
}
# Fused computations made only of these do no work either (a fusion around a bitcast).
_FREE_IN_FUSION = _FREE | {"reshape"}


@dataclass(frozen=True)
class Instruction:
    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: str
    root: bool = False  # the computation's result


@dataclass(frozen=True)
class OutsideOp:
    """One XLA instruction around the kernels: its kind, FLOPs and HBM bytes per run, and how often it runs."""

    name: str
    opcode: str
    flops: float
    bytes: float
    written_bytes: float  # of `bytes`, those it writes
    count: int = 1
    vector_ops: float = 0.0  # elements its non-matmul arithmetic processes (at the vector units' rate), per run
    padding_flops: float = 0.0  # what its convolutions' narrow features cost the MXUs beyond `flops`, per run


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _matching(text: str, start: int) -> int:
    """Index just past the bracket closing the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _parse_instruction(line: str) -> Instruction | None:
    line = line.strip()
    root = line.startswith("ROOT ")
    if root:
        line = line[5:]
    if not _INSTRUCTION.match(line):
        return None
    name, rest = line.split(" = ", 1)
    name = name.lstrip("%")
    if rest.startswith("("):
        end = _matching(rest, 0)
    else:
        end = rest.find(" ")
        # a layout may hold spaces only inside braces, which have none in practice
    shape, rest = rest[:end], rest[end:].lstrip()
    paren = rest.find("(")
    if paren < 0:
        return None
    opcode = rest[:paren]
    close = _matching(rest, paren)
    operands = [re.sub(r"/\*.*?\*/", "", o).split(" ")[-1].lstrip("%") for o in _split_top(rest[paren + 1 : close - 1])]
    return Instruction(name=name, shape=shape, opcode=opcode, operands=operands, attrs=rest[close:], root=root)


def parse_module(text: str) -> tuple[dict[str, list[Instruction]], str | None]:
    """{computation name: its instructions} and the entry computation's name."""
    computations: dict[str, list[Instruction]] = {}
    entry: str | None = None
    current: str | None = None
    lines: list[str] = []  # the current computation's instructions, one string each

    def close() -> None:
        if current is not None:
            computations[current] += [i for i in map(_parse_instruction, lines) if i is not None]

    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            if header:
                current, lines = header.group(2), []
                computations[current] = []
                if header.group(1):
                    entry = current
        elif line.rstrip() == "}":
            close()
            current = None
        elif _INSTRUCTION.match(line) or not lines:
            lines.append(line)
        else:  # an attribute that spans lines (a kernel's metadata may hold newlines): same instruction
            lines[-1] += "\n" + line
    close()
    return computations, entry


_TILE = re.compile(r"T\(([\d,]+)\)")


def _arrays(shape: str, stored: bool = False) -> list[tuple[str, list[int], bool]]:
    """(dtype, dims, in HBM) of each array in a (possibly tuple) shape; S(n) with n > 0 is not HBM. `stored`: the
    dims as XLA:TPU stores them, in tiles (a layout's T(8,128) pads its most minor dimension to 128 and the next to
    8), so an array whose minor dimension is 62 takes and moves the bytes of one of 128. Measured on a v5e: x * 2
    over bf16 (16, 64, 30, 62, n) takes 2069 us for n = 62, 2083 for 64 and 2119 for 128."""
    found = []
    for dtype, dims, layout in _ARRAY.findall(shape):
        sizes = [int(d) for d in dims.split(",") if d]
        space = re.search(r"S\((\d+)\)", layout or "")
        order, tile = re.match(r"\{([\d,]*)", layout or ""), _TILE.search(layout or "")
        if stored and order and tile:
            minor_to_major = [int(v) for v in order.group(1).split(",") if v]
            for axis, t in zip(minor_to_major, reversed([int(v) for v in tile.group(1).split(",")]), strict=False):
                if axis < len(sizes):
                    sizes[axis] = -(-sizes[axis] // t) * t
        found.append((dtype, sizes, not space or space.group(1) == "0"))
    return found


def hbm_bytes(shape: str, first_only: bool = False) -> float:
    arrays = _arrays(shape, stored=True)[:1] if first_only else _arrays(shape, stored=True)
    return float(sum(_DTYPE_BYTES.get(dt, 0) * math.prod(dims) for dt, dims, hbm in arrays if hbm))


def _elements(shape: str) -> int:
    arrays = _arrays(shape)
    return math.prod(arrays[0][1]) if arrays else 0


def _matmul_flops(inst: Instruction, shapes: dict[str, str]) -> float:
    out = _elements(inst.shape)
    if inst.opcode == "dot":
        lhs = _arrays(shapes.get(inst.operands[0], ""))
        dims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", inst.attrs)
        if not lhs or not dims:
            return 0.0
        k = math.prod(lhs[0][1][int(d)] for d in dims.group(1).split(",") if d)
        return 2.0 * out * k
    if inst.opcode == "convolution":
        rhs = _arrays(shapes.get(inst.operands[1], "")) if len(inst.operands) > 1 else []
        labels = re.search(r"dim_labels=\w+_(\w+)->", inst.attrs)
        if not rhs or not labels or "o" not in labels.group(1):
            return 0.0
        rhs_dims = rhs[0][1]
        out_features = rhs_dims[labels.group(1).index("o")] if len(rhs_dims) == len(labels.group(1)) else 1
        return 2.0 * out * math.prod(rhs_dims) / max(out_features, 1) * _dilated_taps(inst.attrs)
    return 0.0


def _dilated_taps(attrs: str) -> float:
    """The share of a convolution's window that meets input: with the input dilated (XLA writes a batched matmul
    as a convolution whose window spans the batch with the input dilated by it), a window of size s sees
    ceil(s / d) of the input's values, not s."""
    size = re.search(r"window=\{[^}]*size=([\dx]+)", attrs)
    dilate = re.search(r"window=\{[^}]*lhs_dilate=([\dx]+)", attrs)
    if not size or not dilate:
        return 1.0
    sizes = [int(v) for v in size.group(1).split("x")]
    dilations = [int(v) for v in dilate.group(1).split("x")]
    if len(sizes) != len(dilations):
        return 1.0
    return math.prod(-(-s // max(d, 1)) / s for s, d in zip(sizes, dilations, strict=True))


# Instructions that only move or relabel data (their bytes are counted at the fusion's boundary): no vector work.
_DATA_MOVEMENT = _FREE_IN_FUSION | {
    "broadcast",
    "transpose",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "concatenate",
    "pad",
    "copy",
    "reverse",
    "gather",
    "scatter",
    "copy-start",
    "dot",
    "convolution",
    "custom-call",
    "while",
    "call",
    "conditional",
    "fusion",
}


def _vector_elements(inst: Instruction, shapes: dict[str, str]) -> float:
    """Elements an arithmetic instruction processes on the vector units: its result's (a reduction: its input's)."""
    if inst.opcode in _DATA_MOVEMENT:
        return 0.0
    if inst.opcode in ("reduce", "reduce-window") and inst.operands:
        return float(_elements(shapes.get(inst.operands[0], "")))
    return float(_elements(inst.shape))


@dataclass(frozen=True)
class Work:
    """What one instruction (a fusion: everything in it) computes."""

    flops: float = 0.0  # of its matmuls and convolutions
    works: bool = False  # whether it computes anything (a fusion of bitcasts does not)
    vector: float = 0.0  # elements its other arithmetic processes on the vector units
    padding_flops: float = 0.0  # _convolution_padding_flops

    def __add__(self, other: Work) -> Work:
        return Work(
            self.flops + other.flops,
            self.works or other.works,
            self.vector + other.vector,
            self.padding_flops + other.padding_flops,
        )


def _instruction_work(inst: Instruction, shapes: dict[str, str], mxu: int | None) -> Work:
    flops = _matmul_flops(inst, shapes)
    padding = _convolution_padding_flops(inst, shapes, flops, mxu) if mxu and flops else 0.0
    return Work(flops, True, _vector_elements(inst, shapes), padding)


def _fusion_work(called: str, computations: dict, mxu: int | None) -> Work:
    insts = computations.get(called, [])
    shapes = {i.name: i.shape for i in insts}
    work = Work()
    for inst in insts:
        if inst.opcode == "fusion":
            inner = _called(inst)
            work += _fusion_work(inner, computations, mxu) if inner else Work(works=True)
        elif inst.opcode not in _FREE_IN_FUSION:
            work += _instruction_work(inst, shapes, mxu)
    return work


def _convolution_padding_flops(inst: Instruction, shapes: dict[str, str], flops: float, mxu: int) -> float:
    """The MXU work a convolution's narrow features waste on an `mxu`-wide MXU, beyond its FLOPs. XLA feeds the
    MXUs one window tap at a time with the input features as the contraction, or, when all taps' features fit one
    MXU width, every tap at once; the contraction and the output features are each padded to the MXU width.
    Measured on v5e (benchmarks/xla_baseline_calibration.py part 3, 128-wide MXU), the share of XLA's usual MXU
    throughput its convolutions reach: 18k's 64 -> 128 features, a tap at a time, 0.52 (modelled 0.5); 39k's 8
    features x 9 taps -> 64 (72 of 128 contraction lanes, 64 of 128 outputs) 0.26 (0.28); 33k's 32 features x 27
    taps -> 64, 0.16 (a tap at a time: 0.125)."""
    if inst.opcode != "convolution" or len(inst.operands) < 2:
        return 0.0
    rhs = _arrays(shapes.get(inst.operands[1], ""))
    labels = re.search(r"dim_labels=\w+_(\w+)->", inst.attrs)
    if not rhs or not labels or len(rhs[0][1]) != len(labels.group(1)) or not {"i", "o"} <= set(labels.group(1)):
        return 0.0
    dims = dict(zip(labels.group(1), rhs[0][1], strict=True))
    features_in, features_out = dims.pop("i"), dims.pop("o")
    taps = math.prod(dims.values()) * _dilated_taps(inst.attrs)
    contraction = features_in * taps if features_in * taps <= mxu else features_in
    if contraction <= 0 or features_out <= 0:
        return 0.0
    waste = (-(-contraction // mxu) * mxu / contraction) * (-(-features_out // mxu) * mxu / features_out)
    return flops * (waste - 1.0)


# Instructions that read only the part of their first operand they return.
_READS_WHAT_IT_RETURNS = {"slice", "dynamic-slice", "gather"}


def _traffic(inst: Instruction, shapes: dict[str, str], computations: dict) -> tuple[float, float]:
    """HBM bytes an instruction reads and writes. A slice or gather reads what it returns, not its whole operand;
    a dynamic-update-slice writes its update into its operand's buffer in place (what scan and lax.map do with
    their results each step). For a fusion the same holds of each parameter that only feeds slicing instructions
    (also through fusions nested in it), and of a fusion whose result is a dynamic-update-slice of a parameter."""
    read = [hbm_bytes(shapes.get(o, "")) for o in inst.operands]
    written = hbm_bytes(inst.shape, first_only=inst.opcode == "copy-start")
    if inst.opcode in _READS_WHAT_IT_RETURNS and read:
        read[0] = min(read[0], _array_bytes(inst.shape))
    elif inst.opcode == "dynamic-update-slice" and len(read) > 1:
        read[0], written = 0.0, min(written, _array_bytes(shapes.get(inst.operands[1], "")))
    elif inst.opcode == "fusion":
        fused = computations.get(_called(inst), [])
        root = _root(fused)
        in_place = root.operands[0] if root is not None and root.opcode == "dynamic-update-slice" else None
        for k, name in _parameters(fused).items():
            if k >= len(read) or not read[k]:
                continue
            if name == in_place and root is not None and [i for i in fused if name in i.operands] == [root]:
                update = next((i.shape for i in fused if i.name == root.operands[1]), "")
                read[k], written = 0.0, min(written, _array_bytes(update))
                continue
            sliced = _sliced_read(name, fused, computations)
            if sliced is not None:
                read[k] = min(read[k], sliced)
    return sum(read), written


def _called(inst: Instruction) -> str:
    called = re.search(r"calls=%?([\w.\-]+)", inst.attrs)
    return called.group(1) if called else ""


def _parameters(insts: list[Instruction]) -> dict[int, str]:
    """{parameter number: its instruction's name} of a computation."""
    return {int(i.operands[0]): i.name for i in insts if i.opcode == "parameter" and i.operands[0].isdigit()}


def _array_bytes(shape: str) -> float:
    """Bytes of a shape's arrays wherever they live (a slice read from HBM may land in VMEM)."""
    return float(sum(_DTYPE_BYTES.get(dt, 0) * math.prod(dims) for dt, dims, _ in _arrays(shape, stored=True)))


def _sliced_read(name: str, insts: list[Instruction], computations: dict, depth: int = 0) -> float | None:
    """Bytes read of a value that only feeds slicing instructions, directly or through nested fusions: what those
    return. None when any use reads it whole."""
    users = [i for i in insts if name in i.operands]
    if not users or depth > 8:
        return None
    total = 0.0
    for user in users:
        if user.opcode in _READS_WHAT_IT_RETURNS and user.operands.index(name) == 0 and user.operands.count(name) == 1:
            total += _array_bytes(user.shape)
        elif user.opcode == "fusion" and user.operands.count(name) == 1:
            inner = computations.get(_called(user), [])
            param = _parameters(inner).get(user.operands.index(name))
            read = _sliced_read(param, inner, computations, depth + 1) if param else None
            if read is None:
                return None
            total += read
        else:
            return None
    return total


def _trip_count(loop: Instruction, caller: list[Instruction], computations: dict) -> int | None:
    """How often a while loop runs: the trip count XLA wrote where it wrote one, else read off a counted loop (what
    scan, fori_loop and lax.map become): a tuple counter that starts at a constant, is stepped by one in the body and
    compared less-than a constant in the condition. None when the loop is anything else."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', loop.attrs)
    if known:
        return int(known.group(1))
    condition = re.search(r"condition=%?([\w.\-]+)", loop.attrs)
    body = re.search(r"body=%?([\w.\-]+)", loop.attrs)
    if not condition or not body or len(loop.operands) != 1:
        return None
    test = _root(computations.get(condition.group(1), []))
    if test is None or test.opcode != "compare" or "direction=LT" not in test.attrs or len(test.operands) != 2:
        return None
    cond_insts = {i.name: i for i in computations.get(condition.group(1), [])}
    index = _counter_index(cond_insts.get(test.operands[0]), cond_insts)
    limit = _constant(cond_insts.get(test.operands[1]), cond_insts)
    caller_insts = {i.name: i for i in caller}
    init = caller_insts.get(loop.operands[0])
    if index is None or limit is None or init is None or init.opcode != "tuple" or index >= len(init.operands):
        return None
    start = _constant(caller_insts.get(init.operands[index]), caller_insts)
    body_insts = {i.name: i for i in computations.get(body.group(1), [])}
    result = _root(list(body_insts.values()))
    if start is None or result is None or result.opcode != "tuple" or index >= len(result.operands):
        return None
    step = body_insts.get(result.operands[index])
    if step is None or step.opcode != "add" or len(step.operands) != 2:
        return None
    a, b = (body_insts.get(o) for o in step.operands)
    stepped_by_one = (_counter_index(a, body_insts) == index and _constant(b, body_insts) == 1) or (
        _counter_index(b, body_insts) == index and _constant(a, body_insts) == 1
    )
    return max(0, limit - start) if stepped_by_one else None


def _root(insts: list[Instruction]) -> Instruction | None:
    return next((i for i in insts if i.root), None)


def _through_copies(inst: Instruction | None, insts: dict[str, Instruction]) -> Instruction | None:
    """The value a chain of copies starts from (XLA copies a loop's counter in and out of its tuple)."""
    for _ in range(len(insts)):
        if inst is None or inst.opcode != "copy" or len(inst.operands) != 1:
            return inst
        inst = insts.get(inst.operands[0])
    return None


def _constant(inst: Instruction | None, insts: dict[str, Instruction]) -> int | None:
    """The value of an integer scalar constant (through copies of it)."""
    inst = _through_copies(inst, insts)
    if inst is None or inst.opcode != "constant" or len(inst.operands) != 1:
        return None
    try:
        return int(inst.operands[0])
    except ValueError:
        return None


def _counter_index(inst: Instruction | None, insts: dict[str, Instruction]) -> int | None:
    """The tuple index of a get-tuple-element of the computation's parameter (a loop's carried value)."""
    inst = _through_copies(inst, insts)
    if inst is None or inst.opcode != "get-tuple-element" or len(inst.operands) != 1:
        return None
    source = insts.get(inst.operands[0])
    index = re.search(r"index=(\d+)", inst.attrs)
    return int(index.group(1)) if index and source is not None and source.opcode == "parameter" else None


def outside_ops(text: str, mxu: int | None = None) -> tuple[list[OutsideOp], bool]:
    """The instructions of a compiled program outside its Pallas kernels that do work, and whether the list
    is complete (False when a while loop's trip count is unknown: its body then counts once). `mxu`: the width
    of the MXU the program was compiled for, to price its convolutions' padding (None: not priced)."""
    computations, entry = parse_module(text)
    if entry is None:
        return [], False
    ops: list[OutsideOp] = []
    complete = _collect(entry, computations, 1, ops, set(), mxu)
    return ops, complete


def repeated_work(ops: list[OutsideOp]) -> tuple[float, float]:
    """FLOPs and HBM bytes the ops do in all runs after their first: what a cost analysis that counts each loop
    body once (XLA's) leaves out."""
    return (
        sum(op.flops * (op.count - 1) for op in ops),
        sum(op.bytes * (op.count - 1) for op in ops),
    )


def _collect(name: str, computations: dict, count: int, ops: list, seen: set, mxu: int | None) -> bool:
    insts = computations.get(name, [])
    shapes = {i.name: i.shape for i in insts}
    complete = True
    for inst in insts:
        op = inst.opcode
        if op in _FREE:
            continue
        if op == "custom-call" and "tpu_custom_call" in inst.attrs:
            continue  # a Pallas kernel: costed by the kernel model
        if op == "while":
            body = re.search(r"body=%?([\w.\-]+)", inst.attrs)
            trips = _trip_count(inst, insts, computations)
            complete = complete and trips is not None
            if body and body.group(1) not in seen:
                complete = (
                    _collect(body.group(1), computations, count * (trips or 1), ops, seen | {body.group(1)}, mxu)
                    and complete
                )
            continue
        if op in ("call", "conditional", "async-start"):
            called = re.findall(
                r"(?:to_apply|calls|branch_computations=\{[^}]*|true_computation|false_computation)=?%([\w.\-]+)",
                inst.attrs,
            )
            for c in called[:1] if op != "conditional" else called:
                if c not in seen:
                    complete = _collect(c, computations, count, ops, seen | {c}, mxu) and complete
            continue
        operand_bytes, out_bytes = _traffic(inst, shapes, computations)
        if op == "fusion":
            fused = _called(inst)
            work = _fusion_work(fused, computations, mxu) if fused else Work(works=True)
            if not work.works:
                continue  # a fusion around bitcasts: free
        else:
            work = _instruction_work(inst, shapes, mxu)
        if operand_bytes + out_bytes + work.flops <= 0:
            continue
        ops.append(
            OutsideOp(
                name=inst.name,
                opcode=op,
                flops=work.flops,
                bytes=operand_bytes + out_bytes,
                written_bytes=out_bytes,
                count=count,
                vector_ops=work.vector,
                padding_flops=work.padding_flops,
            )
        )
    return complete


def describe(op: OutsideOp) -> str:
    return json.dumps({"name": op.name, "opcode": op.opcode})
