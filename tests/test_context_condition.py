"""The docs ablation as a server condition (`serve --context docs|none`), through the SDK's in-memory client.

`none` must leave an agent no way into the docs (no read_docs tool, no docs resources, no doc content in the
prompt or the instructions, no doc pointer in any result or schema) while the check says as precisely what is
wrong; every result and server_info record the condition.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from jaxbench_mcp import api
from jaxbench_mcp.catalog import conditions
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.frontends.server import build_server
from jaxbench_mcp.models import Profile, TargetEstimate, Verdict
from jaxbench_mcp.store import Store
from jaxbench_mcp.taxonomy import ErrorClass, Status

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"


@pytest.fixture
def bench(tmp_path):
    return api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))


def run(bench, body, context):
    async def go():
        async with Client(build_server(bench, context=context)) as client:
            return await body(client)

    return anyio.run(go)


def test_none_offers_no_way_into_the_docs(bench):
    async def body(client):
        tools = await client.list_tools()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompt = await client.get_prompt("optimize_workload", {"workload_id": "8p_GEMM"})
        return client.instructions, tools.tools, resources.resources, templates.resource_templates, prompt

    instructions, tools, resources, templates, prompt = run(bench, body, "none")
    names = [t.name for t in tools]
    assert "read_docs" not in names and "check_kernel" in names and "tune_kernel" in names
    assert not [r for r in resources if str(r.uri).startswith("jaxbench://docs/")]
    assert any(str(r.uri).startswith("jaxbench://workloads/") for r in resources)
    assert [t.uri_template for t in templates] == ["jaxbench://workloads/{workload_id}"]
    prompt_text = "\n".join(m.content.text for m in prompt.messages)
    assert "check_kernel" in prompt_text
    # Nothing an agent is shown points into the docs: instructions, prompt, tool descriptions and schemas.
    for text in [instructions, prompt_text, *(json.dumps(t.model_dump(mode="json")) for t in tools)]:
        assert not conditions.mentions_docs(text), text[:300]


def test_docs_condition_keeps_everything(bench):
    async def body(client):
        tools = await client.list_tools()
        resources = await client.list_resources()
        prompt = await client.get_prompt("optimize_workload", {"workload_id": "8p_GEMM"})
        info = await client.call_tool("server_info", {})
        return client.instructions, tools.tools, resources.resources, prompt, info

    instructions, tools, resources, prompt, info = run(bench, body, "docs")
    assert "read_docs" in [t.name for t in tools]
    assert any(str(r.uri).startswith("jaxbench://docs/") for r in resources)
    assert "read_docs(workload_id='8p_GEMM')" in prompt.messages[0].content.text
    assert "read_docs" in instructions
    assert info.structured_content["context"] == "docs"


def test_server_info_records_condition_and_provenance(bench):
    async def body(client):
        return await client.call_tool("server_info", {})

    info = run(bench, body, "none")
    assert info.structured_content["context"] == "none"
    prov = info.structured_content["provenance"]
    assert prov["context"] == "none" and len(prov["jaxbench_commit"]) == 40
    assert {"jax", "jaxlib", "libtpu", "jaxbench_mcp", "tolerance_rule"} <= set(prov)
    assert "context condition: none" in info.content[0].text


def test_a_verdict_keeps_its_error_and_loses_its_doc_pointers(tmp_path):
    """The same failing kernel under both conditions: same status, class, message and hint; docs only in `docs`;
    the stored attempt records the condition it was checked in."""
    source = (KERNELS / "bad_syntax.py").read_text()  # fails at load: no compile to wait for

    benches = {}

    def check(context):
        # A server closes its bench when it stops: one bench per condition.
        benches[context] = api.JaxBench(
            store=Store(tmp_path / f"{context}.sqlite3"), checker=Checker(spares=0, slots=1)
        )

        async def body(client):
            return await client.call_tool("check_kernel", {"workload_id": "8p_GEMM", "source": source})

        return run(benches[context], body, context)

    with_docs, without = check("docs"), check("none")
    a, b = with_docs.structured_content["verdict"], without.structured_content["verdict"]
    assert a["status"] == b["status"] == "invalid_kernel"
    assert a["error_class"] == b["error_class"] and a["message"] == b["message"] and a["hint"] == b["hint"]
    assert a["docs"] and b["docs"] == []
    assert "read: " in with_docs.content[0].text and "read: " not in without.content[0].text
    assert not conditions.mentions_docs(without.content[0].text)
    assert (a["context"], b["context"]) == ("docs", "none")
    stored = json.loads(Store(tmp_path / "none.sqlite3").get(b["attempt_id"])["result_json"])
    assert stored["context"] == "none"


def _profile_with_pointers() -> Profile:
    verdict = Verdict(
        status=Status.CORRECT,
        message="correct on 3 seeds",
        docs=["errors#block-shape-tiling"],
        workload_id="8p_GEMM",
        size="small",
        targets=["v6e"],
        tier="cpu_libtpu",
        warnings=["the grid is small (see performance#block-size-vmem)"],
    )
    entry = TargetEstimate(
        target="v6e",
        candidate_us=10.0,
        xla_baseline_us=12.0,
        roofline_us=5.0,
        advice=["memory-bound (k): move fewer HBM bytes (read_docs: performance#roofline)"],
        flags=["XLA baseline estimate below its memory bound"],
        docs=["performance#reading-profile"],
    )
    return Profile(
        workload_id="8p_GEMM", tier="cpu_libtpu", kind="static estimate", label="x", verdict=verdict, targets=[entry]
    )


def test_strip_docs_cuts_pointers_and_keeps_the_rest():
    profile = _profile_with_pointers()
    stripped = conditions.strip_docs(profile)
    assert stripped.verdict.docs == [] and stripped.targets[0].docs == []
    assert stripped.targets[0].advice == ["memory-bound (k): move fewer HBM bytes"]
    assert stripped.verdict.warnings == ["the grid is small"]
    assert stripped.targets[0].flags == profile.targets[0].flags
    assert stripped.targets[0].candidate_us == 10.0 and stripped.verdict.message == profile.verdict.message
    assert not conditions.mentions_docs(stripped.summary()) and conditions.mentions_docs(profile.summary())
    assert profile.targets[0].docs == ["performance#reading-profile"]  # the original is untouched


def test_scrub_keeps_code_that_looks_like_calls():
    hint = "Python if/for/int() on a traced value: use pl.when / jax.lax.cond, jax.lax.fori_loop, or jnp.where."
    assert conditions.scrub_text(hint) == hint
    assert conditions.scrub_text("fold it in (read_docs: performance#when-xla-wins)") == "fold it in"


def test_every_catalog_hint_survives_the_filter_whole():
    """Hints say what to change, not where to read: the `none` condition leaves each one as it is."""
    from jaxbench_mcp import taxonomy
    from jaxbench_mcp.checking import error_catalog

    hints = [i.hint for i in taxonomy.ERROR_CLASSES.values()] + [e.hint for e in error_catalog.CATALOG]
    assert len(hints) > 40
    assert [h for h in hints if conditions.scrub_text(h) != h] == []
    assert ErrorClass.SYNTAX_ERROR in taxonomy.ERROR_CLASSES


def test_unknown_condition_is_refused():
    with pytest.raises(conditions.UnknownContext, match="'docs'"):
        conditions.check_context("some")
    out = subprocess.run(
        [sys.executable, "-m", "jaxbench_mcp", "serve", "--context", "some"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "--context" in out.stderr


def test_every_tool_is_named_in_the_instructions_gemini_md_and_the_skill(bench):
    async def body(client):
        return client.instructions, [t.name for t in (await client.list_tools()).tools]

    instructions, tools = run(bench, body, "docs")
    texts = {
        "instructions": instructions,
        "GEMINI.md": (ROOT / "GEMINI.md").read_text(),
        "skill": (ROOT / "skills" / "pallas-kernel-loop" / "SKILL.md").read_text(),
    }
    missing = {where: [t for t in tools if t not in text] for where, text in texts.items()}
    assert missing == {where: [] for where in texts}
