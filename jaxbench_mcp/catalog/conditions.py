"""The context condition of a server or campaign: with the curated docs (`docs`) or without them (`none`).

JAXBench's headline result is a docs ablation: an agent's kernels are correct far more often when it is given
curated Pallas docs. `serve --context none` runs the other arm of that experiment: the server offers no
`read_docs` tool, no docs resources and no doc content in its prompt, and the results it returns carry no
pointer into the docs. The check itself is the same in both conditions, so error messages, shapes, error
values and fix hints stay as precise; only what points into (or quotes) the docs is removed.

The removal is a filter on result models at the server boundary (`strip_docs`), so the checker, the estimator
and the attempts store are the same code in both conditions; every result records its condition in its
`context` field.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

from jaxbench_mcp.catalog import docs
from jaxbench_mcp.errors import AgentError

CONTEXTS = ("docs", "none")
Context = Literal["docs", "none"]
DEFAULT_CONTEXT: Context = "docs"


class UnknownContext(AgentError, ValueError):
    pass


def check_context(context: str | None) -> Context:
    """The condition's canonical name; None means the default (`docs`)."""
    if context is None:
        return DEFAULT_CONTEXT
    name = context.strip().lower()
    if name not in CONTEXTS:
        raise UnknownContext(f"unknown context condition {context!r}: use 'docs' (curated docs) or 'none' (no docs)")
    return name  # type: ignore[return-value]


# Fields that only point into the docs: emptied.
_DOC_LIST_FIELDS = frozenset({"docs", "doc_refs"})
# Fields of free text that may carry a doc pointer next to what they say: the pointer is cut, the rest kept.
_TEXT_FIELDS = frozenset(
    {"hint", "message", "advice", "flags", "warnings", "notes", "label", "detail", "reason", "check", "pallas_work"}
)
# "(read_docs: performance#roofline)", "(read: errors#x, y#z)", "(see recipe-matmul#tiling)".
_POINTER_IN_PARENS = re.compile(r"\s*\((?:read_docs|read|see)\b[^()]*\)", re.I)
# "read_docs(topic=...)" or "read_docs(...)" said inline, and a trailing "Read: a#b, c#d" / "read the docs ...".
_READ_DOCS_CALL = re.compile(r"\s*(?:;|,)?\s*(?:call\s+|see\s+|use\s+)?read_docs\([^)]*\)", re.I)
_TRAILING_READ = re.compile(r"\s*(?:[.;]\s*)?(?:read|see)\s*:?\s+(?:[a-z0-9-]+#[a-z0-9-]+(?:\s*,\s*)?)+\.?\s*$", re.I)
# A bare "topic#anchor" reference left in a sentence.
_BARE_REF = re.compile(r"\b(?:read_docs\s*:?\s*)?([a-z][a-z0-9-]*)#[a-z0-9][a-z0-9-]*\b")


def _topics() -> frozenset[str]:
    return frozenset(t.id for t in docs.all_topics())


def scrub_text(text: str) -> str:
    """`text` without its pointers into the docs (what remains is said as before)."""
    if not text:
        return text
    out = _POINTER_IN_PARENS.sub("", text)
    out = _READ_DOCS_CALL.sub("", out)
    out = _TRAILING_READ.sub("", out)
    topics = _topics()
    out = _BARE_REF.sub(lambda m: "" if m.group(1) in topics else m.group(0), out)
    out = re.sub(r"\bread_docs\b", "", out)
    # Tidy what the cuts left: doubled spaces, a space before punctuation, empty parentheses.
    out = re.sub(r"(?<![\w)])\(\s*\)", "", out)
    out = re.sub(r"[ \t]{2,}", " ", out)
    out = re.sub(r"\s+([.,;:)])", r"\1", out)
    return out.strip() if text.strip() == text else out


def _strip(value: Any, name: str | None) -> Any:
    if isinstance(value, BaseModel):
        return _strip_model(value)
    if isinstance(value, list):
        if name in _DOC_LIST_FIELDS:
            return []
        if name in _TEXT_FIELDS:
            kept = [scrub_text(v) if isinstance(v, str) else _strip(v, None) for v in value]
            return [v for v in kept if v != ""]
        return [_strip(v, None) for v in value]
    if isinstance(value, dict):
        return {k: _strip(v, None) for k, v in value.items()}
    if isinstance(value, str) and name in _TEXT_FIELDS:
        return scrub_text(value)
    return value


def _strip_model[M: BaseModel](model: M) -> M:
    update: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        new = _strip(value, name)
        if new is not value:
            update[name] = new
    return model.model_copy(update=update)


def strip_docs[M: BaseModel](model: M) -> M:
    """A copy of a result model for the `none` condition: doc lists emptied, doc pointers cut from its texts.
    Everything else (errors, numbers) is unchanged."""
    return _strip_model(model)


def for_context[M: BaseModel](model: M, context: Context) -> M:
    """The model as a server in `context` returns it. A result keeps the `context` it was checked in (an
    attempt listed later by a server in the other condition says so)."""
    return strip_docs(model) if context == "none" else model


def mentions_docs(text: str) -> bool:
    """Whether a text still points into the docs (used by tests and by the server's own self-check)."""
    topics = _topics()
    if "read_docs" in text or "jaxbench://docs" in text:
        return True
    return any(m.group(0).split("#")[0] in topics for m in re.finditer(r"[a-z][a-z0-9-]*#[a-z0-9][a-z0-9-]*", text))
