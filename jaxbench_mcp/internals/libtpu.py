"""libtpu's own files and messages, read in one place: the dump flag, the layout and formats of its
--xla_jf_dump_to folder (final bundle schedules and per-bundle slot use of each Mosaic kernel, and the kernel's
own name in the custom call it compiled), the scoped VMEM each compiled kernel was given and used, and the sizes
in its VMEM overflow messages. Formats checked against
libtpu 0.0.52 (tests/test_estimate.py compiles kernels and reads the dumps they leave)."""

from __future__ import annotations

import base64
import binascii
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from jax.extend.mlir import ir

_SCHEDULE_SUFFIX = "-schedule-analysis_final_bundles.txt"
_UTILIZATION_SUFFIX = "-final_hlo-static-per-bundle-utilization.txt"
_BUNDLES_SUFFIX = "-final_bundles.txt"
# Only the final passes are dumped (the three files above): every pass would be ~3,000 files per compile.
_DUMP_PASSES = "final_"
# A bundle line of a final_bundles file: "<address> [LH|LB|LE|PB|PF|CT]: <'>' per enclosing loop> { ... }" (LB:
# the first bundle of a loop's body).
_BUNDLE_LINE = re.compile(r"^\s*(?:0x[0-9a-f]+|\d+)\s+(?P<mark>LH|LB|LE|PB|PF|CT)?:\s*(?P<depth>>*)\s*\{")
# Work pushed into a unit whose result is popped later: a matmul into MXU n (vmatmul ... mxuN), its result vregs
# popped from that MXU's result buffer (vpop ... mrf.mxuN): one 32-bit vreg per 32 bits of a pushed row (a bf16
# vreg packs two rows, so it returns two); a transpose fed to XLU n in parts (start, cont..., end), its vregs popped
# (vpop.trf.xluN) once the last part is in.
_RESULT_PUSH = re.compile(
    r"vmatmul\.(?:msk\.)?[a-z]*(?P<bits>\d+)[\w.]*?\b(?P<mxu>mxu\d+)"
    r"|vxpose\.[\w.]*?\b(?P<xlu>xlu\d+)\b(?![\w.]*\.(?:start|cont)\b)[\w.]*"
)
_RESULT_POP = re.compile(r"vpop\.(?:[\w.]*?\bmrf\.(?P<mxu>mxu\d+)|trf\.(?P<xlu>xlu\d+))")
# An op of a bundle: "%<value> = <mnemonic> <operands>".
_OP_MNEMONIC = re.compile(r"^\s*%[\w]+\s*=\s*(\S+)")
_COMMENT = re.compile(r"/\*.*?\*/")
# A predicated region: a conditional branch over it ("%7 = sbr.rel (%p3) target = $region9": jump to region 9 when
# %p3 holds), and the bundle, marked PF, whose comment names that region ("Start/End empty region 9"): the region's
# bundles lie between them.
_SKIP_BRANCH = re.compile(r"=\s*sbr\.rel\s*\([^)]*\)\s*target\s*=\s*\$region(\d+)")
_REGION_NAMED = re.compile(r"\bregion (\d+)\b")
# The kinds of predicated regions (a pl.when's branch, once compiled) by what they issue themselves, the regions inside
# them aside: DMAs only ("copy"), matmuls ("matmul"), other vector work ("vector"); each runs as often as its branches
# do, which the trace tells per kind (kernel_replay.branch_kind). A region with a loop inside, or none of these,
# counts as the code around it.
BranchKind = Literal["copy", "matmul", "vector"]
BRANCH_KINDS: tuple[BranchKind, ...] = get_args(BranchKind)
COPY_BRANCH: BranchKind = "copy"
# The kinds that do work of their own (priced at their work's ratio, not by their copies).
WORK_BRANCH_KINDS = tuple(kind for kind in BRANCH_KINDS if kind != COPY_BRANCH)
# The Mosaic module a kernel's custom call carries (base64 MLIR bytecode) in its schedule file's HLO text.
_MOSAIC_BODY = re.compile(r'custom_call_target="tpu_custom_call".*?"custom_call_config":\{"body":"([A-Za-z0-9+/=]+)"')
# Characters jax replaces by "_" when it names a Mosaic module after the kernel function (mlir.sanitize_name).
_UNSAFE_IN_NAME = re.compile(r"[^\w.-]")
# An array type in HLO text, "bf16[8192,576]": its dimensions (a scalar's are empty).
_HLO_SHAPE = re.compile(r"\b[a-z][a-z0-9]*\[([\d,]*)\]")
# Programs of XLA's own in a dump, as opposed to Mosaic kernels.
_XLA_PROGRAMS = re.compile(r"^\d+-(TLP|<late-[a-z]+>)-")
# The sizes in libtpu's VMEM overflow messages (the rest of those lines is the whole HLO instruction).
_VMEM_SIZES = re.compile(
    r"(Scoped allocation with size [\d.]+\w? and limit [\d.]+\w? exceeded scoped vmem limit by [\d.]+\w?"
    r"|Used [\d.]+\w? of [\d.]+\w? vmem"
    r"|Allocation \(size=\d+\) would exceed memory \(size=\d+\)(?= :: #allocation\d+ \[shape = '[^']*', space=vmem))"
)
# A compiled Mosaic kernel's backend config: the scoped VMEM limit it compiled under and what it used (memory
# space 1 is VMEM; each used config is one allocation of the kernel).
_SCOPED_LIMIT = re.compile(r'"scoped_memory_configs":\[\{"memory_space":"1","offset":"0","size":"(\d+)"')
_SCOPED_USED = re.compile(r'"used_scoped_memory_configs":\[(.*?)\]')
_VMEM_ALLOCATION = re.compile(r'"memory_space":"1","offset":"\d+","size":"(\d+)"')


@dataclass(frozen=True)
class KernelSchedule:
    name: str
    bundles: int
    slot_use: dict[str, float]  # average use of each slot kind per bundle, as a fraction of its capacity
    # Bundles by loop depth: [outside any loop, inside one loop, inside two, ...]. A gridded kernel's grid is
    # one loop; the loops inside it are the kernel body's own (those the compiler did not unroll).
    depth_bundles: tuple[int, ...] = ()
    # The kernel's own name (its Mosaic module's: pallas_call's name=, else the kernel function's): what pairs
    # the schedule with the traced kernel. None when the dump does not show it.
    kernel: str | None = None
    # The custom call's operand and result shapes ("8192x7168,7168x576->8192x576"): what tells apart kernels that
    # share a name (one kernel function called on several shapes). None when the dump does not show them.
    call_shapes: str | None = None
    loop_bodies: tuple[LoopBody, ...] = ()
    # Per branch kind (BRANCH_KINDS), per loop depth: the bundles of its predicated regions, which the steps whose
    # predicate skips them jump over.
    branch_bundles: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ResultOp:
    """An op of a loop body that pushes work into a unit whose results are popped later, or pops one."""

    bundle: int  # counted from the body's first
    pushes: str | None = None  # the unit it pushes work into ("mxu0", "xlu1")
    results: int = 0  # the result vregs that work returns (a transpose's: 1, all popped after its last part)
    pops: str | None = None  # the unit whose next result it pops
    depth: int = 0  # the loops around its bundle (its body's depth, or deeper in an inner loop of that body)


@dataclass(frozen=True)
class LoopBody:
    """One loop body of a final schedule (or, at depth 0, the whole schedule): its bundles and, in order, its ops
    that push or pop results."""

    depth: int  # the loops around its bundles, its own included (a gridded kernel's grid is depth 1)
    bundles: int
    ops: tuple[ResultOp, ...]


def mosaic_kernel_name(func_name: str) -> str:
    """The name jax gives the Mosaic module of a kernel whose traced body is called `func_name`."""
    return _UNSAFE_IN_NAME.sub("_", func_name)


def _kernel_name(schedule_text: str) -> str | None:
    """The name of the Mosaic module in a kernel's schedule file (None if it has none or it cannot be read)."""
    found = _MOSAIC_BODY.search(schedule_text)
    if not found:
        return None
    try:
        body = base64.b64decode(found.group(1), validate=True)
        context = ir.Context()
        context.allow_unregistered_dialects = True  # Mosaic's own dialects: only the module's name is read
        with context:
            name = ir.Module.parse(body).operation.attributes["sym_name"]
    except (binascii.Error, ValueError, KeyError, ir.MLIRError):
        return None
    return ir.StringAttr(name).value


def call_shapes(schedule_text: str) -> str | None:
    """A kernel's custom call in its schedule file's HLO text, as "operand shapes->result shapes" (dims only: the
    form analysis/kernels.call_shapes gives a traced kernel); None if the line or its operand list is not there."""
    line = next((ln for ln in schedule_text.splitlines() if 'custom_call_target="tpu_custom_call"' in ln), None)
    if line is None or " custom-call(" not in line or "operand_layout_constraints={" not in line:
        return None
    result = line.split(" custom-call(", 1)[0].split("=", 1)[-1]
    start = line.index("operand_layout_constraints={") + len("operand_layout_constraints=")
    depth = 0
    for end in range(start, len(line)):
        depth += {"{": 1, "}": -1}.get(line[end], 0)
        if depth == 0:
            break
    operands = line[start : end + 1]

    def dims(text: str) -> str:
        return ",".join(shape.replace(",", "x") for shape in _HLO_SHAPE.findall(text))

    return f"{dims(operands)}->{dims(result)}"


def _mnemonics(text: str) -> list[str]:
    """The mnemonics of one bundle line's ops (the text after its '{')."""
    parts = _COMMENT.sub("", text).rsplit("}", 1)[0].split(";;")
    return [op.group(1) for part in parts if (op := _OP_MNEMONIC.match(part))]


def _issues_vector_work(mnemonic: str) -> bool:
    # Vector-unit ops begin with "v"; sync-flag ops among them (vsync*, vwait*) only signal or wait on copies.
    return mnemonic.startswith("v") and not mnemonic.startswith(("vsync", "vwait"))


def _result_ops(text: str) -> list[tuple[str | None, int, str | None]]:
    """The ops of one bundle line's text (after its '{') that push or pop results, as ResultOp's fields but its
    bundle and depth."""
    found: list[tuple[str | None, int, str | None]] = []
    for part in _COMMENT.sub("", text).rsplit("}", 1)[0].split(";;"):
        op = _OP_MNEMONIC.match(part)
        if not op:
            continue
        if push := _RESULT_PUSH.fullmatch(op.group(1)):
            results = 1 if push.group("xlu") else max(1, 32 // int(push.group("bits")))
            found.append((push.group("mxu") or push.group("xlu"), results, None))
        elif pop := _RESULT_POP.fullmatch(op.group(1)):
            found.append((None, 0, pop.group("mxu") or pop.group("xlu")))
    return found


def read_bundles(path: Path) -> tuple[tuple[int, ...], tuple[LoopBody, ...], dict[str, tuple[int, ...]]]:
    """A final_bundles file's bundles per loop nesting depth; its bodies: the whole schedule (depth 0), then its
    loop bodies: at each depth, the bundles of that depth or deeper, split where a loop body begins (a body holds
    its inner loops' bundles once); and per branch kind, per depth, the bundles of its regions (KernelSchedule)."""
    counts: dict[int, int] = {}
    bodies: dict[int, list[tuple[int, list[ResultOp]]]] = {}  # depth -> [(bundles, ops)]
    bundle_work: list[tuple[int, int, int, int, bool]] = []  # per bundle: depth, DMAs, matmuls, other vector ops, ops
    opened: dict[int, tuple[int, int]] = {}  # region -> (first bundle, its branch's depth)
    closed: list[tuple[int, int, int]] = []  # (first bundle, end, depth) of the branch regions
    index = -1
    with open(path, errors="replace") as f:
        for line in f:
            match = _BUNDLE_LINE.match(line)
            if not match:
                continue
            index += 1
            depth = len(match.group("depth"))
            counts[depth] = counts.get(depth, 0) + 1
            text = line[match.end() :]
            if match.group("mark") == "PF":
                for named in _REGION_NAMED.findall(text):
                    region = opened.pop(int(named), None)
                    # A region that skips to its loop's exit test guards a pipelined grid loop's whole body (its
                    # prologue and epilogue trips): it is no branch of the kernel's.
                    if region and index > region[0] and "loop exit test" not in text:
                        closed.append((region[0], index, region[1]))
            mnemonics = _mnemonics(text)
            bundle_work.append(
                (
                    depth,
                    sum(m.startswith("dma.") for m in mnemonics),
                    sum(m.startswith("vmatmul") for m in mnemonics),
                    sum(map(_issues_vector_work, mnemonics)),
                    bool(mnemonics),
                )
            )
            for target in _SKIP_BRANCH.findall(text):
                opened.setdefault(int(target), (index + 1, depth))
            parsed = _result_ops(text)
            for d in range(depth + 1):
                open_bodies = bodies.setdefault(d, [])
                if not open_bodies or (match.group("mark") == "LB" and d == depth and d):
                    open_bodies.append((0, []))
                size, ops = open_bodies[-1]
                ops.extend(ResultOp(size, *fields, depth=depth) for fields in parsed)
                open_bodies[-1] = (size + 1, ops)
    depth_bundles = tuple(counts.get(d, 0) for d in range(max(counts) + 1)) if counts else ()
    loop_bodies = tuple(LoopBody(d, size, tuple(ops)) for d, found in sorted(bodies.items()) for size, ops in found)
    return depth_bundles, loop_bodies, _branch_bundles(closed, bundle_work, len(depth_bundles))


def _branch_bundles(closed: list[tuple[int, int, int]], bundle_work: list, depths: int) -> dict[str, tuple[int, ...]]:
    """Per kind, per depth, the bundles of the branch regions: each region owns its bundles but those of the kinded
    regions inside it, and takes its kind from what they issue (_region_kind). A region with a loop inside (a bundle
    deeper than its branch; a branch's delay slots are printed at no depth) or of no kind leaves its bundles to the
    region around it, or to the code around all of them."""
    found = {kind: [0] * depths for kind in BRANCH_KINDS}
    owner = [False] * len(bundle_work)  # whether a kinded region already owns the bundle
    for start, end, depth in sorted(closed, key=lambda r: r[1] - r[0]):  # inner regions first
        inside = range(start, end)
        if any(bundle_work[i][0] != depth and bundle_work[i][4] for i in inside):
            continue
        own = [i for i in inside if not owner[i]]
        kind = _region_kind(*(sum(bundle_work[i][k] for i in own) for k in (1, 2, 3)))
        if kind is not None:
            found[kind][depth] += len(own)
            for i in own:
                owner[i] = True
    return {kind: tuple(n) for kind, n in found.items() if any(n)}


def _region_kind(dmas: int, matmuls: int, vector_ops: int) -> BranchKind | None:
    if matmuls:
        return "matmul"
    if vector_ops:
        return "vector"
    return "copy" if dmas else None


def _parse_utilization(path: Path) -> dict[str, float]:
    lines = path.read_text().splitlines()
    try:
        header = lines.index("== CAPACTIY:") if "== CAPACTIY:" in lines else lines.index("== CAPACITY:")
    except ValueError:
        return {}
    names = [n.strip() for n in lines[header + 1].split(",")]
    capacity = [int(c) for c in lines[header + 2].split()]
    totals, rows = [0] * len(names), 0
    for line in lines[header + 4 :]:
        cells = line.split()
        if len(cells) != len(names):
            continue
        rows += 1
        totals = [t + int(c) for t, c in zip(totals, cells, strict=True)]
    if rows == 0:
        return {}
    return {n: round(t / (rows * cap), 4) for n, t, cap in zip(names, totals, capacity, strict=True) if cap}


def parse_dump(directory: Path) -> list[KernelSchedule]:
    """The Mosaic kernels that libtpu scheduled, in compile order, from an --xla_jf_dump_to folder."""
    schedules = []
    for path in sorted(directory.glob(f"*{_SCHEDULE_SUFFIX}"), key=lambda p: int(p.name.split("-", 1)[0])):
        if _XLA_PROGRAMS.match(path.name):
            continue
        text = path.read_text()
        match = re.search(r"total scheduled bundles:\s+(\d+)", text)
        if not match or "tpu_custom_call" not in text:  # XLA's own fusions are dumped too
            continue
        stem = path.name.split("-", 1)[1].rsplit("-", 2)[0]  # "<id>-<name>-NN-schedule..." -> name
        stem = re.sub(r"-\d+$", "", stem)
        prefix = path.name.split("-", 1)[0]
        utilization = next(directory.glob(f"{prefix}-*{_UTILIZATION_SUFFIX}"), None)
        bundles = next(
            (p for p in directory.glob(f"{prefix}-*{_BUNDLES_SUFFIX}") if _SCHEDULE_SUFFIX not in p.name), None
        )
        depth_bundles, loop_bodies, branch_bundles = read_bundles(bundles) if bundles else ((), (), {})
        schedules.append(
            KernelSchedule(
                name=stem,
                bundles=int(match.group(1)),
                slot_use=_parse_utilization(utilization) if utilization else {},
                depth_bundles=depth_bundles,
                kernel=_kernel_name(text),
                call_shapes=call_shapes(text),
                loop_bodies=loop_bodies,
                branch_bundles=branch_bundles,
            )
        )
    return schedules


def collect_dump(dump_root: Path, generation: str) -> Path:
    """Move what libtpu dumped since the last call into a folder of its own for this generation (emptied first:
    a process that compiles many times keeps only its latest compile there)."""
    target = dump_root / f"target-{generation}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    for path in list(dump_root.iterdir()):
        if path.is_file():
            shutil.move(str(path), target / path.name)
    return target


def dump_flag(directory: str) -> str:
    """The LIBTPU_INIT_ARGS flags that make libtpu dump the final schedules of every compile into `directory`
    (read once, at start)."""
    return f"--xla_jf_dump_to={directory} --xla_jf_dump_llo_pass_label_regex={_DUMP_PASSES}"


def dump_dir_of(init_args: str) -> str | None:
    """The dump folder a LIBTPU_INIT_ARGS value sets, if any."""
    found = re.search(r"--xla_jf_dump_to=(\S+)", init_args)
    return found.group(1) if found else None


def loaded_in_process() -> bool:
    """Whether libtpu is already loaded into this process (it then ignores LIBTPU_INIT_ARGS changes)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libtpu" in line for line in maps)
    except OSError:
        return False


def vmem_overflow_sizes(message: str) -> str | None:
    """The sizes in a VMEM overflow message (the rest of those lines is a whole HLO instruction)."""
    found = _VMEM_SIZES.search(message)
    return found.group(0) if found else None


@dataclass(frozen=True)
class ScopedVmem:
    limit: int | None  # the scoped VMEM limit the kernel compiled under; None when the config does not say
    used: int  # the scoped VMEM the compiled kernel allocated


def scoped_vmem(compiled_hlo: str) -> list[ScopedVmem]:
    """The scoped VMEM of each Mosaic kernel in a compiled program's HLO text (compiled.as_text()), in the order
    its custom calls appear: what the compiler itself allocated, to set beside the estimate made before compiling.
    A kernel name inside a config is JSON-escaped, so it cannot spell these keys."""
    found = []
    for line in compiled_hlo.splitlines():
        if 'custom_call_target="tpu_custom_call"' not in line or not (used := _SCOPED_USED.search(line)):
            continue
        limit = _SCOPED_LIMIT.search(line)
        sizes = _VMEM_ALLOCATION.findall(used.group(1))
        found.append(ScopedVmem(int(limit.group(1)) if limit else None, sum(int(x) for x in sizes)))
    return found
