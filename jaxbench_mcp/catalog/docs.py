"""The curated Pallas/TPU documentation: parse context_docs/*.md, list, read, search, context packs.

Each file in context_docs/ is one topic: a front matter block (id, title, tags, jax_version), a `# Title`
line, then `## Section title {#anchor}` sections. A section is addressed as "<topic id>#<anchor>" and is
the unit of retrieval. Everything here is pure Python (stdlib + pydantic), offline, and parsed once.

Public entry points:
  read_docs(topic=None, query=None, page=1, page_chars=6000) -> DocsPage
  context_pack(workload_id, budget_chars=12000) -> DocsPage
  section_exists(ref) / get_section(ref) / all_topics()
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from jaxbench_mcp.catalog import workloads
from jaxbench_mcp.catalog.assets import asset_dir
from jaxbench_mcp.errors import AgentError

DEFAULT_PAGE_CHARS = 6000
MIN_PAGE_CHARS = 500
MAX_PAGE_CHARS = 50_000
HITS_PER_PAGE = 8
SNIPPET_CHARS = 240
MIN_RELATIVE_SCORE = 0.15


class DocsError(AgentError, ValueError):
    """A request to the docs that cannot be answered as asked (the message says what to do)."""


class UnknownTopic(DocsError):
    def __init__(self, topic: str, close_matches: list[str]):
        self.topic, self.close_matches = topic, close_matches
        hint = f" Did you mean: {', '.join(close_matches)}?" if close_matches else ""
        super().__init__(
            f"unknown docs topic or section {topic!r}.{hint} read_docs() with no arguments lists all topics."
        )


class PageOutOfRange(DocsError):
    pass


class DocsFormatError(ValueError):
    """A file in context_docs/ breaks the format (a bug in the docs, not in the request)."""

    def __init__(self, path: Path, line: int, problem: str):
        super().__init__(f"{path.name}:{line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


# ---- parsing ------------------------------------------------------------------------------------

_ANCHOR = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_SECTION_HEADING = re.compile(r"^##\s+(?P<title>.+?)\s*\{#(?P<anchor>[^}\s]+)\}\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class _Section:
    topic_id: str
    anchor: str
    title: str
    text: str  # markdown, starting with its own "## " heading line

    @property
    def ref(self) -> str:
        return f"{self.topic_id}#{self.anchor}"


@dataclass(frozen=True)
class _Topic:
    id: str
    title: str
    tags: tuple[str, ...]
    jax_version: str
    intro: str  # text between "# Title" and the first section (may be empty)
    sections: tuple[_Section, ...]
    path: Path

    @property
    def text(self) -> str:
        parts = [f"# {self.title}"] + ([self.intro] if self.intro else []) + [s.text for s in self.sections]
        return "\n\n".join(parts)


def _front_matter_value(raw: str) -> str:
    # "key: value   # comment" -> "value" (a '#' inside the value needs a space before it to start a comment)
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def _parse_tags(value: str, path: Path, line: int) -> tuple[str, ...]:
    if not (value.startswith("[") and value.endswith("]")):
        raise DocsFormatError(path, line, "tags must be a list like [a, b, c]")
    tags = tuple(t.strip().strip("'\"") for t in value[1:-1].split(",") if t.strip())
    if not tags:
        raise DocsFormatError(path, line, "tags is empty")
    return tags


def parse_topic(path: Path) -> _Topic:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != "---":
        raise DocsFormatError(path, 1, "must start with a '---' front matter block")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise DocsFormatError(path, 1, "front matter block is not closed with '---'") from None
    meta: dict[str, str] = {}
    meta_line: dict[str, int] = {}
    for i in range(1, end):
        if not lines[i].strip():
            continue
        key, sep, value = lines[i].partition(":")
        if not sep:
            raise DocsFormatError(path, i + 1, f"front matter line is not 'key: value': {lines[i]!r}")
        meta[key.strip()] = _front_matter_value(value)
        meta_line[key.strip()] = i + 1
    for key in ("id", "title", "tags", "jax_version"):
        if not meta.get(key):
            raise DocsFormatError(path, end + 1, f"front matter lacks {key!r}")
    if meta["id"] != path.stem:
        raise DocsFormatError(path, meta_line["id"], f"id {meta['id']!r} must equal the file stem {path.stem!r}")
    tags = _parse_tags(meta["tags"], path, meta_line["tags"])

    body = lines[end + 1 :]
    offset = end + 2  # 1-based line number of body[0]
    first = next((j for j, ln in enumerate(body) if ln.strip()), None)
    if first is None or not body[first].startswith("# "):
        raise DocsFormatError(path, offset + (first or 0), "the body must start with a '# Title' line")
    heading_title = body[first][2:].strip()

    sections: list[_Section] = []
    intro: list[str] = []
    current: tuple[str, str, int] | None = None
    current_lines: list[str] = []
    in_fence = False
    seen: set[str] = set()

    def flush():
        if current is not None:
            title, anchor, _ = current
            sections.append(_Section(meta["id"], anchor, title, "\n".join(current_lines).strip()))

    for j in range(first + 1, len(body)):
        ln = body[j]
        if _FENCE.match(ln):
            in_fence = not in_fence
        if not in_fence and ln.startswith("## "):
            m = _SECTION_HEADING.match(ln)
            if not m:
                raise DocsFormatError(path, offset + j, "a '## ' heading needs an anchor: '## Title {#anchor}'")
            anchor = m.group("anchor")
            if not _ANCHOR.match(anchor):
                raise DocsFormatError(path, offset + j, f"anchor {anchor!r} must be lowercase letters, digits and '-'")
            if anchor in seen:
                raise DocsFormatError(path, offset + j, f"anchor {anchor!r} is used twice in this file")
            seen.add(anchor)
            flush()
            current = (m.group("title"), anchor, offset + j)
            current_lines = [f"## {m.group('title')}"]
            continue
        if not in_fence and ln.startswith("# "):
            raise DocsFormatError(path, offset + j, "only one '# ' title per file; sections use '## '")
        (current_lines if current is not None else intro).append(ln)
    if in_fence:
        raise DocsFormatError(path, len(lines), "a code fence is not closed")
    flush()
    if not sections:
        raise DocsFormatError(path, offset + first, "a topic needs at least one '## ' section")
    return _Topic(
        id=meta["id"],
        title=meta["title"] if meta["title"] else heading_title,
        tags=tags,
        jax_version=meta["jax_version"],
        intro="\n".join(intro).strip(),
        sections=tuple(sections),
        path=path,
    )


@functools.lru_cache(maxsize=4)
def _load(directory: str) -> dict[str, _Topic]:
    topics = {}
    for path in sorted(Path(directory).glob("*.md")):
        topic = parse_topic(path)
        topics[topic.id] = topic
    return topics


def _docs_dir() -> Path:
    return asset_dir("context_docs")


def _topics() -> dict[str, _Topic]:
    return _load(str(_docs_dir()))


@functools.lru_cache(maxsize=4)
def _section_index(directory: str) -> dict[str, _Section]:
    return {s.ref: s for t in _load(directory).values() for s in t.sections}


def _sections() -> dict[str, _Section]:
    return _section_index(str(_docs_dir()))


def section_exists(ref: str) -> bool:
    return ref in _sections()


def all_section_refs() -> list[str]:
    return list(_sections())


# ---- result models ------------------------------------------------------------------------------


class SectionInfo(BaseModel):
    ref: str = Field(description="address to read it: read_docs(topic=ref)")
    title: str
    chars: int


class DocTopic(BaseModel):
    id: str
    title: str
    tags: list[str]
    jax_version: str = Field(description="the jax version the text and examples were verified against")
    chars: int
    sections: list[SectionInfo]

    def summary(self) -> str:
        head = f"{self.id}: {self.title} [{', '.join(self.tags)}] ({self.chars} chars)"
        return "\n".join([head] + [f"  {s.ref}  {s.title}" for s in self.sections])


class DocSection(BaseModel):
    ref: str
    topic: str
    title: str
    text: str = Field(description="markdown")
    part: str | None = Field(default=None, description="'k/n' when a long section is split across pages")
    abridged: bool = Field(default=False, description="runnable examples left out (read the ref for them)")

    def summary(self) -> str:
        part = f" (part {self.part})" if self.part else ""
        short = " (examples left out)" if self.abridged else ""
        return f"[{self.ref}]{part}{short}\n{self.text}"


class DocSearchHit(BaseModel):
    ref: str
    title: str
    topic_title: str
    score: float
    snippet: str

    def summary(self) -> str:
        return f"{self.ref}  {self.title}  (score {self.score:.1f})\n    {self.snippet}"


class DocsPage(BaseModel):
    kind: Literal["topics", "topic", "section", "search", "context"]
    query: str | None = None
    topic: str | None = None
    workload_id: str | None = None
    topics: list[DocTopic] = Field(default_factory=list)
    sections: list[DocSection] = Field(default_factory=list)
    hits: list[DocSearchHit] = Field(default_factory=list)
    omitted: list[str] = Field(default_factory=list, description="relevant section refs left out (budget)")
    page: int = 1
    pages: int = 1
    text: str = Field(description="plain-text rendering of this page, what an agent reads")

    def summary(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


def _section_model(s: _Section, text: str | None = None, part: str | None = None, abridged: bool = False) -> DocSection:
    return DocSection(
        ref=s.ref, topic=s.topic_id, title=s.title, text=s.text if text is None else text, part=part, abridged=abridged
    )


_PY_EXAMPLE = re.compile(r"^```python[^\n]*\n.*?^```[ \t]*$", re.S | re.M)


def _abridge(s: _Section) -> str:
    """The section without its runnable examples (a pointer to the full section replaces each)."""
    return _PY_EXAMPLE.sub(f"(runnable example: read_docs(topic='{s.ref}'))", s.text)


def _topic_model(t: _Topic) -> DocTopic:
    return DocTopic(
        id=t.id,
        title=t.title,
        tags=list(t.tags),
        jax_version=t.jax_version,
        chars=len(t.text),
        sections=[SectionInfo(ref=s.ref, title=s.title, chars=len(s.text)) for s in t.sections],
    )


def all_topics() -> list[DocTopic]:
    return [_topic_model(t) for t in _topics().values()]


def get_section(ref: str) -> DocSection:
    sections = _sections()
    if ref not in sections:
        raise UnknownTopic(ref, _close_refs(ref))
    return _section_model(sections[ref])


# ---- pagination ---------------------------------------------------------------------------------


def _split_text(text: str, limit: int) -> list[str]:
    """Split markdown into chunks <= limit, at blank lines outside code fences when possible."""
    if len(text) <= limit:
        return [text]
    lines = text.split("\n")
    # Candidate cut points: after a blank line that is not inside a fence.
    chunks: list[str] = []
    buf: list[str] = []
    size = 0
    in_fence = False
    last_cut = -1  # index in buf after which a clean cut is possible
    for ln in lines:
        if _FENCE.match(ln):
            in_fence = not in_fence
        buf.append(ln)
        size += len(ln) + 1
        if not in_fence and not ln.strip():
            last_cut = len(buf)
        if size > limit:
            cut = last_cut if 0 < last_cut < len(buf) else len(buf) - 1
            if cut <= 0:
                cut = len(buf)
            head, buf = buf[:cut], buf[cut:]
            chunk = "\n".join(head).strip("\n")
            while len(chunk) > limit:  # one enormous line: hard split
                chunks.append(chunk[:limit])
                chunk = chunk[limit:]
            if chunk:
                chunks.append(chunk)
            size = sum(len(x) + 1 for x in buf)
            last_cut = -1
    rest = "\n".join(buf).strip("\n")
    while len(rest) > limit:
        chunks.append(rest[:limit])
        rest = rest[limit:]
    if rest:
        chunks.append(rest)
    return chunks


def _pack(items: list[str], limit: int) -> list[list[int]]:
    """Group item indices into pages whose joined size stays <= limit (an oversize item gets its own page)."""
    pages: list[list[int]] = [[]]
    size = 0
    for i, item in enumerate(items):
        cost = len(item) + 2
        if pages[-1] and size + cost > limit:
            pages.append([])
            size = 0
        pages[-1].append(i)
        size += cost
    return pages


def _check_page(page: int, pages: int) -> None:
    if page < 1 or page > pages:
        raise PageOutOfRange(f"page {page} does not exist; this result has pages 1..{pages}")


def _check_page_chars(page_chars: int) -> int:
    if not isinstance(page_chars, int) or page_chars < MIN_PAGE_CHARS:
        raise DocsError(f"page_chars must be an integer >= {MIN_PAGE_CHARS}")
    return min(page_chars, MAX_PAGE_CHARS)


def _footer(page: int, pages: int, call: str) -> str:
    if pages <= 1:
        return ""
    more = f" Next: {call.format(page=page + 1)}" if page < pages else ""
    return f"\n\n-- page {page} of {pages}.{more}"


# ---- read_docs ----------------------------------------------------------------------------------


def _close_refs(name: str) -> list[str]:
    topics = _topics()
    candidates = list(topics) + list(_sections())
    base = name.split("#", 1)[0]
    close = difflib.get_close_matches(name, candidates, n=4, cutoff=0.5)
    if "#" in name and base in topics:
        anchors = [s.ref for s in topics[base].sections]
        close = difflib.get_close_matches(name, anchors, n=4, cutoff=0.3) or anchors[:6]
    contains = [c for c in candidates if base and base.lower() in c.lower() and c not in close]
    return list(dict.fromkeys(close + contains))[:6]


def _list_topics(page: int, page_chars: int) -> DocsPage:
    models = all_topics()
    blocks = [m.summary() for m in models]
    groups = _pack(blocks, page_chars - 300)
    _check_page(page, len(groups))
    chosen = [models[i] for i in groups[page - 1]]
    total = sum(m.chars for m in models)
    head = (
        f"{len(models)} docs topics ({total} chars in all). Read one with read_docs(topic='<id>') or one "
        "section with read_docs(topic='<id>#<anchor>'); search with read_docs(query='...')."
    )
    text = "\n\n".join([head] + [m.summary() for m in chosen]) + _footer(page, len(groups), "read_docs(page={page})")
    return DocsPage(kind="topics", topics=chosen, page=page, pages=len(groups), text=text)


def _read_topic(topic_id: str, page: int, page_chars: int) -> DocsPage:
    topic = _topics()[topic_id]
    # Units: the intro, then each section, each split further if it alone exceeds a page.
    units: list[tuple[_Section | None, str, str | None]] = []
    budget = page_chars - 200
    if topic.intro:
        units.extend((None, chunk, None) for chunk in _split_text(topic.intro, budget))
    for s in topic.sections:
        chunks = _split_text(s.text, budget)
        for k, chunk in enumerate(chunks, 1):
            units.append((s, chunk, f"{k}/{len(chunks)}" if len(chunks) > 1 else None))
    groups = _pack([u[1] for u in units], budget)
    _check_page(page, len(groups))
    chosen = [units[i] for i in groups[page - 1]]
    sections = [_section_model(s, chunk, part) for s, chunk, part in chosen if s is not None]
    head = f"# {topic.title}  [topic {topic.id}, jax {topic.jax_version}]"
    body = "\n\n".join(chunk for _, chunk, _ in chosen)
    text = f"{head}\n\n{body}" + _footer(page, len(groups), f"read_docs(topic='{topic_id}', page={{page}})")
    return DocsPage(
        kind="topic",
        topic=topic_id,
        topics=[_topic_model(topic)],
        sections=sections,
        page=page,
        pages=len(groups),
        text=text,
    )


def _read_section(ref: str, page: int, page_chars: int) -> DocsPage:
    s = _sections()[ref]
    chunks = _split_text(s.text, page_chars - 200)
    _check_page(page, len(chunks))
    part = f"{page}/{len(chunks)}" if len(chunks) > 1 else None
    model = _section_model(s, chunks[page - 1], part)
    text = model.summary() + _footer(page, len(chunks), f"read_docs(topic='{ref}', page={{page}})")
    return DocsPage(kind="section", topic=ref, sections=[model], page=page, pages=len(chunks), text=text)


def read_docs(
    topic: str | None = None, query: str | None = None, page: int = 1, page_chars: int = DEFAULT_PAGE_CHARS
) -> DocsPage:
    """The docs, one page at a time.

    no arguments          -> the list of topics and their section refs
    topic="id"            -> the whole topic, paginated
    topic="id#anchor"     -> that one section
    query="..."           -> ranked sections (BM25); with a topic, only within that topic
    """
    page_chars = _check_page_chars(page_chars)
    if not isinstance(page, int):
        raise DocsError("page must be an integer >= 1")
    topic = topic.strip() if isinstance(topic, str) and topic.strip() else None
    query = query.strip() if isinstance(query, str) and query.strip() else None
    if topic is not None:
        topic = topic.removeprefix("#")
        base = topic.split("#", 1)[0]
        if base not in _topics() or ("#" in topic and topic not in _sections()):
            raise UnknownTopic(topic, _close_refs(topic))
    if query is not None:
        return search(query, topic=topic.split("#", 1)[0] if topic else None, page=page, page_chars=page_chars)
    if topic is None:
        return _list_topics(page, page_chars)
    if "#" in topic:
        return _read_section(topic, page, page_chars)
    return _read_topic(topic, page, page_chars)


# ---- search (BM25 over sections) ----------------------------------------------------------------

_TOKEN = re.compile(
    r"\(\s*\d+\s*(?:,\s*\d+\s*)+\)"  # shape tuples: (8, 128)
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"  # identifiers, dotted names: pl.BlockSpec
    r"|\d+(?:\.\d+)?"  # numbers
)
_STOP = frozenset(
    "a an and are as at be by can do does for from has have how i if in into is it its may more must no not "
    "of on or so such than that the then their there these this to use used uses using was what when where "
    "which while will with you your".split()
)
_TITLE_WEIGHT, _TAG_WEIGHT, _CODE_WEIGHT = 3.0, 1.0, 0.5
_K1, _B = 1.2, 0.5
_CODE_BLOCK = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", re.S | re.M)


def _split_code(text: str) -> tuple[str, str]:
    """(prose, code) of a section: code blocks count less for ranking than the explanation."""
    code = "\n".join(m.group(0) for m in _CODE_BLOCK.finditer(text))
    return _CODE_BLOCK.sub(" ", text), code


def _norm(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lowercase terms; identifiers stay whole (pl.blockspec, vmem_limit_bytes, (8,128)) and also split."""
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0).lower()
        if tok.startswith("("):
            nums = re.findall(r"\d+", tok)
            out.append("(" + ",".join(nums) + ")")
            out.extend(nums)
            continue
        if tok in _STOP:
            continue
        out.append(_norm(tok))
        if "." in tok or "_" in tok:
            out.extend(_norm(part) for part in re.split(r"[._]+", tok) if len(part) > 1 and part not in _STOP)
    return out


@dataclass(frozen=True)
class _Index:
    refs: tuple[str, ...]
    tfs: tuple[dict[str, float], ...]  # weighted term frequencies per section
    lengths: tuple[float, ...]
    avg_len: float
    df: Counter[str]


@functools.lru_cache(maxsize=4)
def _bm25_index(directory: str) -> _Index:
    topics = _load(directory)
    refs, tfs, lengths = [], [], []
    df: Counter[str] = Counter()
    for t in topics.values():
        tag_terms = tokenize(" ".join(t.tags))
        for s in t.sections:
            prose, code = _split_code(s.text)
            tf: defaultdict[str, float] = defaultdict(float)  # weighted counts: a Counter's are ints
            for term in tokenize(prose):
                tf[term] += 1.0
            for term in tokenize(code):
                tf[term] += _CODE_WEIGHT
            length = sum(tf.values())
            # The title and the anchor are the curated description of a section; tags describe its topic.
            for term in tokenize(s.title + " " + s.anchor.replace("-", " ")):
                tf[term] += _TITLE_WEIGHT
            for term in tag_terms:
                tf[term] += _TAG_WEIGHT
            refs.append(s.ref)
            tfs.append(tf)
            lengths.append(float(length))
            df.update(tf.keys())
    avg = sum(lengths) / max(len(lengths), 1)
    return _Index(tuple(refs), tuple(tfs), tuple(lengths), avg, df)


def _phrase(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def _rank(query: str, topic: str | None = None) -> list[tuple[str, float]]:
    directory = str(_docs_dir())
    index = _bm25_index(directory)
    sections = _section_index(directory)
    terms = Counter(tokenize(query))
    if not terms:
        return []
    n = len(index.refs)
    phrase = _phrase(query)
    scored = []
    for i, ref in enumerate(index.refs):
        if topic is not None and not ref.startswith(topic + "#"):
            continue
        tf, length = index.tfs[i], index.lengths[i]
        score = 0.0
        for term, qtf in terms.items():
            f = tf.get(term, 0)
            if not f:
                continue
            idf = math.log(1 + (n - index.df[term] + 0.5) / (index.df[term] + 0.5))
            score += qtf * idf * f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * length / index.avg_len))
        if score > 0 and len(phrase) >= 12 and phrase in _phrase(sections[ref].text):
            score *= 1.5  # a pasted error message or exact phrase
        if score > 0:
            scored.append((ref, score))
    scored.sort(key=lambda rs: (-rs[1], rs[0]))
    return scored


def _snippet(text: str, query: str) -> str:
    body = re.sub(r"\s+", " ", text.split("\n", 1)[1] if "\n" in text else text).strip()
    terms = {t for t in tokenize(query) if len(t) > 1}
    if len(body) <= SNIPPET_CHARS or not terms:
        return body[:SNIPPET_CHARS] + ("..." if len(body) > SNIPPET_CHARS else "")
    words = [(m.start(), _norm(m.group(0).lower())) for m in _TOKEN.finditer(body)]
    best, best_pos = -1, 0
    for k, (pos, _) in enumerate(words):
        window = {w for p, w in words[k : k + 40] if p - pos < SNIPPET_CHARS}
        hits = len(window & terms)
        if hits > best:
            best, best_pos = hits, pos
    start = max(0, best_pos - 40)
    start = body.rfind(" ", 0, start) + 1 if start else 0
    out = body[start : start + SNIPPET_CHARS]
    return ("..." if start else "") + out + ("..." if start + SNIPPET_CHARS < len(body) else "")


def search(query: str, topic: str | None = None, page: int = 1, page_chars: int = DEFAULT_PAGE_CHARS) -> DocsPage:
    page_chars = _check_page_chars(page_chars)
    sections = _sections()
    topics = _topics()
    ranked = _rank(query, topic)
    scope = f" in topic {topic}" if topic else ""
    if not ranked:
        text = (
            f"No docs section matches {query!r}{scope}. Try other words (API names such as pl.BlockSpec, "
            "error text), or read_docs() for the list of topics."
        )
        return DocsPage(kind="search", query=query, topic=topic, text=text)
    # Drop the long tail: sections scoring far below the best one only share a common word.
    ranked = [(ref, score) for ref, score in ranked if score >= MIN_RELATIVE_SCORE * ranked[0][1]]
    hits = []
    for ref, score in ranked:
        s = sections[ref]
        hits.append(
            DocSearchHit(
                ref=ref,
                title=s.title,
                topic_title=topics[s.topic_id].title,
                score=round(score, 2),
                snippet=_snippet(s.text, query),
            )
        )
    rendered = [h.summary() for h in hits]
    groups: list[list[int]] = []
    for group in _pack(rendered, page_chars - 400):
        groups.extend(group[k : k + HITS_PER_PAGE] for k in range(0, len(group), HITS_PER_PAGE))
    _check_page(page, len(groups))
    chosen = [hits[i] for i in groups[page - 1]]
    head = f"{len(hits)} sections match {query!r}{scope}; best first. Read one with read_docs(topic='<ref>')."
    parts = [head] + [h.summary() for h in chosen]
    shown: list[DocSection] = []
    if page == 1:
        best = sections[chosen[0].ref]
        used = sum(len(p) + 2 for p in parts) + 200
        if used + len(best.text) <= page_chars:
            shown.append(_section_model(best))
            parts.append(f"--- best match in full ---\n{_section_model(best).summary()}")
    call = f"read_docs(query={query!r}" + (f", topic={topic!r}" if topic else "") + ", page={page})"
    text = "\n\n".join(parts) + _footer(page, len(groups), call)
    return DocsPage(
        kind="search", query=query, topic=topic, hits=chosen, sections=shown, page=page, pages=len(groups), text=text
    )


# ---- context packs ------------------------------------------------------------------------------

# Always first: how a kernel is built, the block rules, and the accumulator pattern.
CORE_SECTIONS = (
    "programming-model#pallas-call",
    "programming-model#grid-and-blockspec",
    "blockspec-tiling#rule-8-128",
    "accumulation#init-under-when",
)

# Operator families: (name, keyword pattern over "<id> <operator>", section refs in priority order).
FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "paged_attention",
        r"paged|ragged_paged",
        (
            "recipe-paged-attention#paged-decode",
            "recipe-paged-attention#ragged-batches",
            "scalar-prefetch#prefetch-grid-spec",
            "manual-dma#async-copy",
            "recipe-paged-attention#decode-performance",
            "recipe-flash-attention#online-softmax",
        ),
    ),
    (
        "attention",
        r"attention|\bmha\b|_mha|gqa|mla|flash|retention|ssd|state_space|mamba",
        (
            "recipe-flash-attention#online-softmax",
            "recipe-flash-attention#causal-skip",
            "recipe-flash-attention#gqa-heads",
            "dimension-semantics#parallel-arbitrary",
        ),
    ),
    (
        "moe",
        r"moe|gmm|grouped|megablox|ragged_dot|expert",
        (
            "recipe-grouped-matmul#group-tiles",
            "scalar-prefetch#prefetch-grid-spec",
            "recipe-grouped-matmul#moe-layer",
            "recipe-matmul#fused-epilogue",
            "recipe-grouped-matmul#gmm-performance",
        ),
    ),
    (
        "conv",
        r"conv",
        ("recipe-convolution#shifted-matmuls", "recipe-convolution#im2col", "recipe-matmul#fused-epilogue"),
    ),
    (
        "matmul",
        r"gemm|matmul|bmm|mlp|swiglu|dense|linear|triangle|einsum",
        (
            "recipe-matmul#fused-epilogue",
            "accumulation#f32-accumulators",
            "performance#mxu-shapes",
            "recipe-matmul#block-sizes",
        ),
    ),
    (
        "norm",
        r"norm",
        ("recipe-norms#rms-norm", "recipe-norms#layer-norm", "recipe-norms#cross-block-stats", "recipe-norms#fusion"),
    ),
    (
        "reduction",
        r"entropy|logsumexp|softmax|_sum|sum_|mean|_max|max_|_min|min_|pool|reduc",
        (
            "recipe-reductions#row-reductions",
            "recipe-reductions#cross-entropy",
            "recipe-reductions#logsumexp",
            "recipe-reductions#scalar-outputs",
        ),
    ),
)

# Within a family, a more specific operator moves one section to the front of that family's list.
FAMILY_FOCUS: tuple[tuple[str, str, str], ...] = (
    ("attention", r"retention|retnet", "recipe-linear-attention#retention"),
    ("attention", r"ssd|state_space|mamba", "recipe-linear-attention#ssd-chunks"),
    ("attention", r"flex", "recipe-attention-variants#score-bias"),
    ("attention", r"\bmla|_mla", "recipe-attention-variants#mla"),
    ("attention", r"gqa", "recipe-attention-variants#head-stacking"),
    ("attention", r"gqa|mla", "recipe-flash-attention#gqa-heads"),
    ("attention", r"sparse", "recipe-attention-variants#pair-list"),
    ("attention", r"sparse", "scalar-prefetch#patterns"),
    ("attention", r"retention|retnet|ssd|state_space|mamba|flex", "recipe-flash-attention#variants"),
    ("moe", r"moe", "recipe-moe-routing#dispatch"),
    ("moe", r"moe|ragged_dot", "recipe-grouped-matmul#moe-layer"),
    ("conv", r"conv3d|convtranspose|conv_transpose", "recipe-convolution#conv-variants"),
    ("matmul", r"triangle", "recipe-triangle-multiplication#channel-major"),
    ("matmul", r"mlp|swiglu|epilogue", "performance#mxu-and-vector"),
    ("matmul", r"bmm", "recipe-matmul#batched"),
    ("matmul", r"_sum|sum_|_max|max_|_min|min_|softmax|logsumexp|norm|pool", "recipe-matmul#row-epilogues"),
    ("norm", r"group_?norm", "recipe-norms#group-stats-mxu"),
    ("norm", r"batch_?norm|instance_?norm|group_?norm", "recipe-norms#cross-block-stats"),
    ("norm", r"layer_?norm", "recipe-norms#layer-norm"),
    ("reduction", r"entropy", "recipe-reductions#cross-entropy"),
    ("reduction", r"entropy", "blockspec-tiling#choose-divisor"),
    ("reduction", r"logsumexp|pool|_sum|sum_", "recipe-reductions#logsumexp"),
)

TAIL_SECTIONS = (
    "performance#block-size-vmem",
    "supported-ops#what-lowers",
    "debugging#interpret-mode",
    "performance#roofline",
)


def families_for(text: str) -> list[str]:
    """Operator families whose keywords occur in `text` (a workload's id and operator)."""
    low = text.lower()
    found = [name for name, pattern, _ in FAMILIES if re.search(pattern, low)]
    # The more specific family already carries the general one's key sections.
    for specific, general in (("paged_attention", "attention"), ("moe", "matmul")):
        if specific in found and general in found:
            found.remove(general)
    return found


def _family_refs(name: str, refs: tuple[str, ...], text: str) -> list[str]:
    ordered = list(refs)
    for family, pattern, ref in reversed(FAMILY_FOCUS):
        if family == name and re.search(pattern, text):
            ordered = [ref] + [r for r in ordered if r != ref]
    return ordered


def _pack_sections(wanted: list[tuple[str, bool]], budget: int, used: int) -> tuple[list[DocSection], list[str]]:
    """Fill `budget` chars in priority order. Each entry is (ref, full): full sections keep their
    runnable examples when they fit and fall back to the abridged text; the others are abridged."""
    sections = _sections()
    chosen: list[DocSection] = []
    omitted: list[str] = []
    seen: set[str] = set()
    for ref, full in wanted:
        if ref in seen:
            continue
        seen.add(ref)
        s = sections[ref]
        candidates = ([_section_model(s)] if full else []) + [_section_model(s, _abridge(s), abridged=True)]
        for model in candidates:
            if model.abridged and model.text == s.text:
                model = _section_model(s)  # nothing to leave out
            cost = len(model.summary()) + 2
            if used + cost <= budget:
                chosen.append(model)
                used += cost
                break
        else:
            omitted.append(ref)
    return chosen, omitted


def context_pack_for(workload_id: str, operator: str, description: str = "", budget_chars: int = 12000) -> DocsPage:
    """The pack for a workload given by its id and operator (context_pack looks these up)."""
    if budget_chars < 1000:
        raise DocsError("budget_chars must be at least 1000")
    families = families_for(f"{workload_id} {operator}") or families_for(description) or ["matmul"]
    key = f"{workload_id} {operator}".lower()
    per_family = [_family_refs(name, rs, key) for name, _, rs in FAMILIES if name in families]
    # Core concepts abridged (their examples are generic), then the families' recipes in full:
    # the first section of each family before the second of any, so a tight budget still covers
    # every family the workload touches; then tuning and debugging, abridged.
    wanted = [(ref, False) for ref in CORE_SECTIONS]
    for k in range(max(len(rs) for rs in per_family)):
        wanted.extend((rs[k], True) for rs in per_family if k < len(rs))
    wanted.extend((ref, False) for ref in TAIL_SECTIONS)
    head = (
        f"Docs for {workload_id} (operator {operator}; families: {', '.join(families)}). "
        "Sections are addressed 'topic#anchor'; read more with read_docs(topic=...) or read_docs(query=...)."
    )
    footer_reserve = 400
    chosen, omitted = _pack_sections(wanted, budget_chars - footer_reserve, len(head) + 2)
    text = "\n\n".join([head] + [m.summary() for m in chosen])
    if omitted:
        text += "\n\n" + _omitted_line(omitted, budget_chars - len(text) - 2)
    return DocsPage(kind="context", workload_id=workload_id, sections=chosen, omitted=omitted, text=text)


def _omitted_line(refs: list[str], room: int) -> str:
    """'Also relevant (left out for size): a, b, ... and N more' within `room` characters (a workload of three
    families can leave out more refs than the footer's reserve holds)."""

    def more(n: int) -> str:
        return f"and {n} more (read_docs lists every section)" if n else ""

    line = "Also relevant (left out for size): "
    for k, ref in enumerate(refs):
        rest = len(refs) - k - 1
        candidate = line + ref + ("" if rest == 0 else ", ")
        if len(candidate) + len(more(rest)) > room:
            return line + more(len(refs) - k)
        line = candidate
    return line


def context_pack(workload_id: str, budget_chars: int = 12000) -> DocsPage:
    """The sections most relevant to one workload, within budget_chars: the core programming model,
    tiling and accumulation first, then the workload's operator family, then tuning and debugging."""
    w = workloads.get_workload(workload_id)
    return context_pack_for(w.id, w.operator, w.description, budget_chars)
