"""What a failure's text says, in a few lines: the candidate's own frames and the decisive exception lines of a
traceback, one line for a failed compile, the name of a signal. error_catalog turns a text into a class, a hint
and doc sections; this module picks the words the agent reads."""

from __future__ import annotations

import re
import signal

from jaxbench_mcp.checking import error_catalog
from jaxbench_mcp.internals import libtpu, tracebacks
from jaxbench_mcp.sandbox import protocol

_MESSAGE_LINES = 8
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def decisive_lines(text: str) -> str:
    """The candidate's own frames and the final exception lines, not the whole traceback."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    own = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m and m.group(1).endswith("candidate.py"):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            own.append(f"candidate.py line {m.group(2)}, in {m.group(3)}: {code}")
    tail_start = max((i for i, line in enumerate(lines) if _FRAME.match(line)), default=-1) + 1
    noise = ("    ", "  File", "Traceback", "---", "The above")
    tail = [line for line in lines[tail_start:] if not line.startswith(noise) and not tracebacks.is_jax_noise(line)]
    picked = own[-2:] + (tail or lines[-3:])
    return "\n".join(line[:400] for line in picked[:_MESSAGE_LINES])


def uncaught_exception(stderr: str, judging: bool = False) -> str:
    """The exception of the last Python traceback in a worker's stderr and where it was raised ('' for none): what
    ended a process that exited on its own. Raised in the checker's own code, it is said so; `judging`: the process
    ran a recorded program, not the candidate's code, so a hand-made program description can be the cause."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return ""
    text = stderr[start:]
    frames = [m for m in map(_FRAME.match, text.splitlines()) if m]
    exception = decisive_lines(text).splitlines()[-1] if text.strip() else ""
    if not frames or not exception:
        return exception
    path, line, function = frames[-1].groups()
    package = path.rfind("/jaxbench_mcp/")
    if package < 0:
        return f"{exception} (raised in {path.rsplit('/', 1)[-1]} line {line}, in {function})"
    where = f"{exception} (raised in {path[package + 1 :]} line {line}, in {function}: the checker's own code"
    if judging:
        return (
            f"{where}, running the program the candidate's process recorded; a program jax traced should never do "
            "this, so unless that process wrote the description by hand, please report it with this message)"
        )
    return f"{where}, so a jaxbench-mcp bug unless the kernel changed that code; please report it with this message)"


def compile_error_line(text: str) -> str | None:
    """One line for one target's failed compile: the VMEM sizes when it ran out of VMEM, else its last decisive line."""
    sizes = libtpu.vmem_overflow_sizes(text)
    if sizes:
        return f"out of VMEM: {sizes}"
    early = text.find(protocol.EARLY_VMEM_REFUSAL)  # the worker's refusal of a hopeless kernel
    if early >= 0:
        return text[early:].splitlines()[0][:300]
    lines = decisive_lines(text).splitlines() if text.strip() else []
    return lines[-1][:300] if lines else None


def compile_failure(text: str) -> str:
    """One line for a failed compile in a profile or estimate: its class and, for a VMEM overflow, the sizes."""
    sizes = libtpu.vmem_overflow_sizes(text)
    detail = f"out of VMEM: {sizes}" if sizes else decisive_lines(text).splitlines()[-1]
    return f"compile failed ({error_catalog.classify('compile', text).error_class}): {detail[:300]}"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
