"""The curated docs: format, every runnable example (TPU interpret mode on CPU + deviceless TPU compiles),
API names against the installed jax, hardware numbers against jax's table, read_docs/search/context_pack."""

import os

# Other test processes on this host may hold libtpu's process lock; deviceless compiles need no device.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import re
import time
import warnings

import numpy as np
import pytest

from jaxbench_mcp.catalog import docs
from jaxbench_mcp.catalog.assets import asset_dir
from jaxbench_mcp.catalog.targets import deviceless_compile, interpret_on_cpu

DOCS_DIR = asset_dir("context_docs")
DOC_FILES = sorted(DOCS_DIR.glob("*.md"))
# A bound on the curated docs: they must stay a quick read, not a manual. Raised from 125_000 when every
# production family got its own recipe (issue #16: linear attention/SSD, attention variants, triangle
# multiplication, MoE routing).
TOTAL_CHARS_LIMIT = 160_000

# ---- helpers: extract and run the examples ------------------------------------------------------

_PY_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```\s*$", re.S | re.M)
# Device kinds that pltpu.get_tpu_info() recognises; tracing under an abstract mesh with one of them is
# how a kernel that asks for chip facts (emit_pipeline, 1-D blocks) is traced on a host without a TPU.


def extract_examples():
    out = []
    for path in DOC_FILES:
        text = path.read_text()
        for m in _PY_BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 2
            out.append(pytest.param(path.name, line, m.group(1), id=f"{path.stem}:{line}"))
    return out


EXAMPLES = extract_examples()


def load_example(source, name):
    namespace = {"__name__": f"docs_example_{name}"}
    exec(compile(source, name, "exec"), namespace)
    for fn in ("run", "example_args", "expected"):
        assert callable(namespace.get(fn)), f"{name}: the example must define {fn}()"
    return namespace


def _tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return {"rtol": 0, "atol": 0}
    if dtype.itemsize <= 2:  # bfloat16 / float16
        return {"rtol": 2e-2, "atol": 2e-2}
    return {"rtol": 2e-4, "atol": 2e-4}


def run_interpret(namespace, generation="v6e", **params):
    """run(*example_args()) in TPU interpret mode on the CPU, NaN-filled uninitialised memory."""
    from jax.experimental.pallas import tpu as pltpu

    args = namespace["example_args"]()
    params = pltpu.InterpretParams(uninitialized_memory="nan", **params)
    return args, interpret_on_cpu(namespace["run"], args, (), generation, params)


def compile_for(namespace, generation):
    import jax

    args = namespace["example_args"]()
    return deviceless_compile(namespace["run"], [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], generation)


def assert_matches(got, want):
    import jax

    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), **_tolerance(w.dtype))


# ---- the examples -------------------------------------------------------------------------------


def test_there_are_enough_examples():
    assert 25 <= len(EXAMPLES) <= 45, len(EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("filename,line,source", EXAMPLES)
def test_example_runs_compiles_and_matches(filename, line, source):
    import jax

    start = time.perf_counter()
    ns = load_example(source, f"{filename}:{line}")
    args, out = run_interpret(ns)
    assert_matches(out, jax.jit(ns["expected"])(*args))
    for generation in ("v5e", "v6e"):
        compile_for(ns, generation)
    # Interpret mode is slow: examples must stay small.
    assert time.perf_counter() - start < 30


DMA_EXAMPLES = [p for p in EXAMPLES if "make_async_copy" in p.values[2]]


@pytest.mark.parametrize("filename,line,source", DMA_EXAMPLES)
def test_manual_dma_examples_are_race_free(filename, line, source):
    import jax

    assert DMA_EXAMPLES
    ns = load_example(source, f"{filename}:{line}")
    args, out = run_interpret(ns, detect_races=True)  # raises RuntimeError("RACE DETECTED ...") on a race
    assert_matches(out, jax.jit(ns["expected"])(*args))


# ---- format and facts ---------------------------------------------------------------------------


def test_every_file_parses_and_ids_are_stems():
    assert DOC_FILES, "context_docs/ has no topics"
    for path in DOC_FILES:
        topic = docs.parse_topic(path)
        assert topic.id == path.stem
        assert topic.sections
        assert topic.jax_version


def test_jax_version_matches_installed():
    import jax

    for path in DOC_FILES:
        assert docs.parse_topic(path).jax_version == jax.__version__, path.name


def test_total_size_is_bounded():
    total = sum(len(p.read_text()) for p in DOC_FILES)
    assert total <= TOTAL_CHARS_LIMIT, total


def test_sections_are_short():
    for ref in docs.all_section_refs():
        assert len(docs.get_section(ref).text) <= 6000, ref


def test_format_errors_are_reported(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("---\nid: bad\ntitle: Bad\ntags: [x]\njax_version: 1\n---\n# Bad\n\n## No anchor\ntext\n")
    with pytest.raises(docs.DocsFormatError, match="anchor"):
        docs.parse_topic(bad)
    bad.write_text("---\nid: other\ntitle: Bad\ntags: [x]\njax_version: 1\n---\n# Bad\n\n## A {#a}\n")
    with pytest.raises(docs.DocsFormatError, match="stem"):
        docs.parse_topic(bad)
    bad.write_text("---\nid: bad\ntitle: Bad\ntags: [x]\njax_version: 1\n---\n# Bad\n\n## A {#a}\nx\n## B {#a}\n")
    with pytest.raises(docs.DocsFormatError, match="twice"):
        docs.parse_topic(bad)


def test_headings_inside_code_blocks_are_not_sections(tmp_path):
    f = tmp_path / "t.md"
    f.write_text(
        "---\nid: t\ntitle: T\ntags: [x]\njax_version: 1\n---\n# T\n\n## A {#a}\n```text\n## not a heading\n```\n"
    )
    topic = docs.parse_topic(f)
    assert [s.anchor for s in topic.sections] == ["a"]


_API_NAME = re.compile(r"\b(pl|pltpu)\.([A-Za-z_][A-Za-z0-9_]*)")
# Machine-readable lines in api-changes#renamed: "`old` -> replacement text".
_RENAMED = re.compile(r"^`(?P<old>(?:pl|pltpu)\.[A-Za-z_][A-Za-z0-9_.]*)` -> (?P<new>.+)$", re.M)


def _removed_names():
    text = (DOCS_DIR / "api-changes.md").read_text()
    return {m.group("old") for m in _RENAMED.finditer(text)}, [m.group("new") for m in _RENAMED.finditer(text)]


def test_every_api_name_exists_in_installed_jax():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    modules = {"pl": pl, "pltpu": pltpu}
    removed, _ = _removed_names()
    assert len(removed) >= 5
    missing = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated names are documented as such
        for path in DOC_FILES:
            for m in _API_NAME.finditer(path.read_text()):
                name = f"{m.group(1)}.{m.group(2)}"
                if name in removed:
                    continue
                if not hasattr(modules[m.group(1)], m.group(2)):
                    missing.add(f"{path.name}: {name}")
    assert not missing, sorted(missing)


def test_removed_names_are_really_gone_and_replacements_exist():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    modules = {"pl": pl, "pltpu": pltpu}
    removed, replacements = _removed_names()
    for old in removed:
        mod, _, name = old.partition(".")
        if "." not in name:
            assert not hasattr(modules[mod], name), f"{old} still exists: do not list it as removed"
    for new in replacements:
        for m in _API_NAME.finditer(new):
            assert hasattr(modules[m.group(1)], m.group(2)), new


def test_hardware_table_matches_jax():
    """memory-spaces#per-generation quotes pltpu.get_tpu_info_for_chip; keep it in sync with jax."""
    from jax.experimental.pallas import tpu as pltpu

    text = docs.get_section("memory-spaces#per-generation").text
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (v4|v5e|v5p|v6e|7x) \|.*$", text, re.M)}
    assert set(rows) == {"v4", "v5e", "v5p", "v6e", "7x"}
    for gen, row in rows.items():
        info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(gen), 1)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == f"{info.vmem_capacity_bytes // 2**20} MiB", (gen, cells)
        assert cells[2] == f"{info.smem_capacity_bytes // 2**20} MiB", (gen, cells)
        assert cells[3] == f"{info.hbm_capacity_bytes / 1e9:.1f} GB", (gen, cells)
        assert cells[4] == f"{info.mem_bw_bytes_per_second / 1e12:.2f} TB/s", (gen, cells)
        assert cells[5] == f"{info.bf16_ops_per_second / 1e12:.1f}", (gen, cells)
        assert cells[6] == f"{info.num_mxus}x {info.mxu_column_size}", (gen, cells)


# ---- read_docs ----------------------------------------------------------------------------------


def test_list_topics():
    page = docs.read_docs()
    assert page.kind == "topics"
    ids = {t.id for t in page.topics}
    if page.pages > 1:
        for p in range(2, page.pages + 1):
            ids |= {t.id for t in docs.read_docs(page=p).topics}
    assert ids == {p.stem for p in DOC_FILES}
    assert "blockspec-tiling#rule-8-128" in docs.read_docs(page_chars=50_000).text


def test_read_section_and_topic():
    sec = docs.read_docs(topic="blockspec-tiling#rule-8-128")
    assert sec.kind == "section" and sec.sections[0].ref == "blockspec-tiling#rule-8-128"
    assert "128" in sec.text
    top = docs.read_docs(topic="blockspec-tiling", page_chars=2000)
    assert top.kind == "topic" and top.pages >= 2
    seen = []
    for p in range(1, top.pages + 1):
        page = docs.read_docs(topic="blockspec-tiling", page=p, page_chars=2000)
        assert len(page.text) <= 2000 + 200, (p, len(page.text))
        assert f"page {p} of {top.pages}" in page.text
        seen.extend(s.ref for s in page.sections)
    assert set(seen) == {r for r in docs.all_section_refs() if r.startswith("blockspec-tiling#")}


def test_long_section_is_split_across_pages():
    ref = max(docs.all_section_refs(), key=lambda r: len(docs.get_section(r).text))
    full = docs.get_section(ref).text
    first = docs.read_docs(topic=ref, page_chars=800)
    assert first.pages >= 2
    texts = [docs.read_docs(topic=ref, page=p, page_chars=800).sections[0].text for p in range(1, first.pages + 1)]
    assert all(len(t) <= 800 for t in texts)
    assert re.sub(r"\s", "", "".join(texts)) == re.sub(r"\s", "", full)


def test_unknown_topic_suggests_close_matches():
    with pytest.raises(docs.UnknownTopic) as err:
        docs.read_docs(topic="blockspec-tilling")
    assert "blockspec-tiling" in err.value.close_matches
    assert isinstance(err.value, ValueError)
    with pytest.raises(docs.UnknownTopic) as err:
        docs.read_docs(topic="blockspec-tiling#rule-8-12")
    assert "blockspec-tiling#rule-8-128" in err.value.close_matches
    with pytest.raises(docs.PageOutOfRange):
        docs.read_docs(topic="blockspec-tiling#rule-8-128", page=9)
    with pytest.raises(docs.DocsError):
        docs.read_docs(page_chars=10)


# ---- search -------------------------------------------------------------------------------------

SEARCH_CASES = [
    ("block shape divisible by 8 and 128", "blockspec-tiling#rule-8-128"),
    ("Ran out of memory in memory space vmem", "errors#vmem-overflow"),
    ("scalar prefetch page table", "recipe-paged-attention#paged-decode"),
    ("accumulator init pl.when", "accumulation#init-under-when"),
    ("vmem_limit_bytes", "performance#vmem-limit"),
    ("PrefetchScalarGridSpec data-dependent index map", "scalar-prefetch#prefetch-grid-spec"),
    ("online softmax running max", "recipe-flash-attention#online-softmax"),
    ("RACE DETECTED", "errors#race-detected"),
    ("TracerBoolConversionError", "errors#traced-control-flow"),
    ("make_async_copy semaphore wait", "manual-dma#async-copy"),
    ("TPUCompilerParams", "api-changes#renamed"),
    ("uninitialized_memory detect_races", "debugging#interpret-mode"),
]


@pytest.mark.parametrize("query,best", SEARCH_CASES)
def test_search_ranks_the_right_section_first(query, best):
    page = docs.read_docs(query=query)
    assert page.kind == "search"
    assert page.hits[0].ref == best, [h.ref for h in page.hits[:5]]


def test_search_pages_and_shows_best_section():
    page = docs.read_docs(query="vmem")
    assert page.hits and page.sections and page.sections[0].ref == page.hits[0].ref
    assert len(page.text) <= docs.DEFAULT_PAGE_CHARS + 200
    if page.pages > 1:
        assert docs.read_docs(query="vmem", page=2).hits


def test_search_within_a_topic_and_no_match():
    page = docs.read_docs(topic="errors", query="vmem")
    assert all(h.ref.startswith("errors#") for h in page.hits)
    nothing = docs.read_docs(query="zzzqqq")
    assert nothing.hits == [] and "No docs section" in nothing.text


def test_tokenizer_keeps_identifiers():
    toks = docs.tokenize("use pl.BlockSpec with vmem_limit_bytes and (8, 128) tiles")
    for t in ("pl.blockspec", "blockspec", "vmem_limit_byte", "vmem", "(8,128)", "128"):
        assert t in toks, (t, toks)


# ---- context packs ------------------------------------------------------------------------------

FAMILY_CASES = [
    ("1p_Flash_Attention", "causal_mha", "attention", "recipe-flash-attention#online-softmax"),
    (
        "7p_Ragged_Paged_Attention",
        "ragged_paged_attention (mixed prefill + decode)",
        "paged_attention",
        "recipe-paged-attention#paged-decode",
    ),
    ("8p_GEMM", "dense_matmul", "matmul", "recipe-matmul#fused-epilogue"),
    ("18k_Conv2D_ReLU_BiasAdd", "Conv2D_ReLU_BiasAdd", "conv", "recipe-convolution#shifted-matmuls"),
    ("12p_RMSNorm", "rms_norm", "norm", "recipe-norms#rms-norm"),
    ("11p_Megablox_GMM", "grouped_matmul", "moe", "recipe-grouped-matmul#group-tiles"),
    ("14p_Ragged_Dot", "ragged_dot", "moe", "recipe-grouped-matmul#group-tiles"),
    ("13p_Cross_Entropy", "fused_cross_entropy", "reduction", "recipe-reductions#cross-entropy"),
    ("3p_MLA_Attention", "mla_attention", "attention", "recipe-attention-variants#mla"),
    ("4p_Sparse_Attention", "block_sparse_attention", "attention", "recipe-attention-variants#pair-list"),
    ("5p_Flex_Attention", "flex_attention", "attention", "recipe-attention-variants#score-bias"),
    ("10p_Sparse_MoE", "sparse_moe", "moe", "recipe-moe-routing#dispatch"),
    ("15p_RetNet_Retention", "retention", "attention", "recipe-linear-attention#retention"),
    ("16p_Mamba2_SSD", "ssd", "attention", "recipe-linear-attention#ssd-chunks"),
    (
        "17p_Triangle_Multiplication",
        "triangle_multiplication",
        "matmul",
        "recipe-triangle-multiplication#channel-major",
    ),
    ("29k_Matmul_Swish_Sum_GroupNorm", "Matmul_Swish_Sum_GroupNorm", "norm", "recipe-norms#group-stats-mxu"),
]


@pytest.mark.parametrize("wid,operator,family,must", FAMILY_CASES)
def test_context_pack_by_family(wid, operator, family, must):
    assert family in docs.families_for(f"{wid} {operator}")
    pack = docs.context_pack_for(wid, operator, budget_chars=12000)
    refs = [s.ref for s in pack.sections]
    assert refs[: len(docs.CORE_SECTIONS)] == list(docs.CORE_SECTIONS)
    assert must in refs, refs
    assert len(pack.text) <= 12000
    small = docs.context_pack_for(wid, operator, budget_chars=4000)
    assert len(small.text) <= 4000 and small.omitted


def test_context_pack_for_registered_workloads():
    from jaxbench_mcp.catalog import workloads

    for w in workloads.all_workloads():
        pack = docs.context_pack(w.id)
        assert pack.kind == "context" and pack.workload_id == w.id
        assert len(pack.text) <= 12000 and len(pack.sections) >= len(docs.CORE_SECTIONS)
        for budget in (4000, 1500):  # the list of what was left out counts against the budget too
            assert len(docs.context_pack(w.id, budget_chars=budget).text) <= budget, (w.id, budget)
    gemm = docs.context_pack("8p_GEMM")
    assert "recipe-matmul#fused-epilogue" in [s.ref for s in gemm.sections]
    conv = docs.context_pack("18k_Conv2D_ReLU_BiasAdd")
    assert "recipe-convolution#shifted-matmuls" in [s.ref for s in conv.sections]


def test_every_family_and_core_ref_exists():
    refs = set(docs.CORE_SECTIONS) | set(docs.TAIL_SECTIONS)
    for _, _, family_refs in docs.FAMILIES:
        refs |= set(family_refs)
    missing = [r for r in refs if not docs.section_exists(r)]
    assert not missing, missing


def test_every_recipe_section_reaches_some_context_pack():
    """A recipe no family or focus names is never handed to an agent unasked: wire new sections in docs.FAMILIES
    or docs.FAMILY_FOCUS."""
    named = {r for _, _, refs in docs.FAMILIES for r in refs} | {ref for _, _, ref in docs.FAMILY_FOCUS}
    orphans = []
    for path in DOC_FILES:
        if path.stem.startswith("recipe-"):
            orphans += [f"{path.stem}#{a}" for a in re.findall(r"\{#([\w-]+)\}", path.read_text())]
    orphans = [r for r in orphans if r not in named]
    assert not orphans, orphans
    assert all(docs.section_exists(ref) for _, _, ref in docs.FAMILY_FOCUS)


def test_internal_links_resolve():
    """Cross references written as `topic#anchor` in the text must exist."""
    link = re.compile(r"`([a-z0-9-]+#[a-z0-9-]+)`")
    bad = []
    for path in DOC_FILES:
        bad.extend(
            f"{path.name}: {m.group(1)}" for m in link.finditer(path.read_text()) if not docs.section_exists(m.group(1))
        )
    assert not bad, bad
