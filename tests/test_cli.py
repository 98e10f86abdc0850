"""The jaxbench-mcp command as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

KERNELS = Path(__file__).parent / "kernels"
CLI = [sys.executable, "-m", "jaxbench_mcp.frontends.cli"]


def run(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def test_list_json_has_the_50_ids_with_both_sizes():
    out = json.loads(run("list", "--json").stdout)
    assert out["count"] == 50 and len({w["id"] for w in out["workloads"]}) == 50
    # Every workload has both sizes; a few have held-out shapes beside them (checked in campaigns), and 15 a
    # full_reduction size (one more seed of every check below full size).
    assert all({"full", "small"} <= set(w["sizes"]) for w in out["workloads"])
    extra = {w["id"]: set(w["sizes"]) - {"full", "small"} for w in out["workloads"]}
    assert all(names <= {"held_out", "full_reduction"} for names in extra.values())
    assert extra["8p_GEMM"] == {"held_out", "full_reduction"}
    assert sum("full_reduction" in names for names in extra.values()) == 15


def test_show_full_gemm_json():
    out = json.loads(run("show", "8p_GEMM", "--size", "full", "--json").stdout)
    assert [(t["shape"], t["dtype"]) for t in out["size"]["inputs"]] == [
        ([8192, 8192], "bfloat16"),
        ([8192, 28672], "bfloat16"),
    ]
    assert out["size"]["flops"] == 2 * 8192 * 8192 * 28672


def test_bad_id_is_one_line_with_close_matches_and_exit_2():
    result = run("show", "8p_GEM")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "8p_GEMM" in result.stderr
    assert result.stdout == ""


def test_bad_command_and_flag_are_one_line_with_exit_2():
    result = run("lst")
    assert result.returncode == 2 and "Did you mean: list" in result.stderr and result.stderr.strip().count("\n") == 0
    result = run("show", "8p_GEMM", "--size", "huge")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "unknown size 'huge' for 8p_GEMM; choose one of full, small, held_out" in result.stderr


def test_info_names_the_tier_and_versions(libtpu_tier):
    out = json.loads(run("info", "--json").stdout)
    assert out["tier"] == "cpu_libtpu" and out["libtpu_version"] and out["default_target"] == "v6e"


def test_check_exit_code_is_0_only_when_correct(tmp_path):
    env_home = {"JAXBENCH_MCP_HOME": str(tmp_path)}
    good = subprocess.run(
        [*CLI, "check", "--workload", "12p_RMSNorm", "--kernel", str(KERNELS / "good_rmsnorm.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env_home},
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["status"] == "correct"
    missing = run("check", "--workload", "12p_RMSNorm", "--kernel", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "no kernel file" in missing.stderr


def test_version_and_serve_flag_mistakes_are_one_line():
    assert run("--version").stdout.strip().startswith("jaxbench-mcp ")
    stdio_with_token = run("serve", "--token-file", "/nonexistent")
    assert stdio_with_token.returncode == 2 and "--transport http" in stdio_with_token.stderr
    assert stdio_with_token.stderr.strip().count("\n") == 0
    missing_file = run("serve", "--transport", "http", "--token-file", "/nonexistent/token")
    assert missing_file.returncode == 2 and "cannot read the token file" in missing_file.stderr
    bad_spares = subprocess.run(
        [*CLI, "serve"], capture_output=True, text=True, timeout=120, env={**os.environ, "JAXBENCH_MCP_SPARES": "lots"}
    )
    assert bad_spares.returncode == 2 and "JAXBENCH_MCP_SPARES='lots'" in bad_spares.stderr
    assert bad_spares.stderr.strip().count("\n") == 0
