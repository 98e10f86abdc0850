"""The `jaxbench-mcp` command: each subcommand is one library call, printed as text or JSON."""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from jaxbench_mcp.models import Profile, Verdict

# The server process and the CLI never take a TPU: only a check's worker may hold the device.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

COMMANDS = (
    "list",
    "show",
    "info",
    "serve",
    "check",
    "profile",
    "docs",
    "evaluate",
    "compare",
    "estimate",
    "tune",
    "workload",
)
# Subcommands that take --workloads DIR (the operator's custom workloads).
_WITH_WORKLOADS = ("list", "show", "serve", "check", "profile", "docs", "evaluate", "estimate", "tune")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, with close matches, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        words = [w.strip("'\",()") for w in message.split()]
        hint = ""
        if "invalid choice:" in message:
            bad = words[words.index("choice:") + 1]
            close = difflib.get_close_matches(bad, COMMANDS, n=2)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
        sys.stderr.write(f"{self.prog}: {message.splitlines()[0]}.{hint} (see {self.prog} --help)\n")
        sys.exit(2)


def _fail(message: str, code: int = 2) -> None:
    sys.stderr.write(f"jaxbench-mcp: {message}\n")
    sys.exit(code)


def _emit(model, as_json: bool) -> None:
    from jaxbench_mcp.models import text_of

    print(model.model_dump_json(indent=2) if as_json else text_of(model))


def build_parser() -> argparse.ArgumentParser:
    from jaxbench_mcp import __version__

    parser = _Parser(
        prog="jaxbench-mcp", description="Workloads, docs, checks and profiles for Pallas TPU kernels (JAXBench)."
    )
    parser.add_argument("--version", action="version", version=f"jaxbench-mcp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list the workloads (the 50, and custom ones with --workloads)")
    p.add_argument("--tier", choices=["production", "kernelbench", "custom"])
    p.add_argument("--operator", help="substring of the operator name")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("show", help="what one workload must compute")
    p.add_argument("workload_id")
    p.add_argument("--size", default="small", help="small, full or a named configuration")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("info", help="the tier this host offers, versions, compile targets")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("serve", help="run the MCP server")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address; any but loopback needs a bearer token")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help="HTTP: require 'Authorization: Bearer <the file's content>' (or set JAXBENCH_MCP_TOKEN)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="HTTP: a Host name clients may use besides the loopback names and the bind address "
        "(DNS-rebinding protection); repeat for more",
    )
    p.add_argument(
        "--show-expert-source",
        action="store_true",
        help="let get_workload return the expert kernel's source (hidden by default, as in JAXBench)",
    )
    p.add_argument(
        "--context",
        choices=["docs", "none"],
        default="docs",
        help="the docs ablation: 'docs' serves the curated docs; 'none' serves no docs and no doc pointers",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run checks and profiles on a Ray cluster of hosts (HEAD:6379, or 'auto' on a "
        "node of it); needs the fleet extra",
    )
    p.add_argument(
        "--host-slots",
        type=int,
        metavar="N",
        help="with --ray: checks each host runs at once (default: the host's "
        "own, 1 on a TPU host, its CPU count elsewhere)",
    )

    p = sub.add_parser("check", help="compile and check a candidate kernel (exit 0 only when correct)")
    p.add_argument("--workload", required=True, help="JAXBench id, e.g. 8p_GEMM")
    p.add_argument("--kernel", required=True, type=Path, help="Python file defining workload(*inputs)")
    p.add_argument("--target", help="comma-separated TPU generations: v4,v5e,v5p,v6e,7x")
    p.add_argument("--size", choices=["small", "full"], help="size of the run stage")
    p.add_argument(
        "--config",
        metavar="NAME|all",
        help="run at this named input configuration (a key of the workload's SIZES), or 'all': one check per "
        "configuration this tier can run, and a combined verdict",
    )
    p.add_argument("--seeds", type=int, default=3, help="hidden seeds to run (1-16)")
    p.add_argument("--allow-no-pallas", action="store_true", help="do not require a pallas_call")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "profile", help="how fast a correct kernel is, next to XLA and the expert kernel (exit 0 when profiled)"
    )
    p.add_argument("--workload", required=True, help="JAXBench id, e.g. 8p_GEMM")
    p.add_argument("--kernel", required=True, type=Path, help="Python file defining workload(*inputs)")
    p.add_argument("--target", help="comma-separated TPU generations: v4,v5e,v5p,v6e,7x")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("docs", help="read or search the Pallas/TPU docs")
    p.add_argument("topic", nargs="?", help="topic id or topic#anchor")
    p.add_argument("--search", metavar="QUERY")
    p.add_argument("--pack", metavar="WORKLOAD", help="the sections most relevant to a workload")
    p.add_argument("--page", type=int, default=1)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("evaluate", help="score a run directory of attempts (<workload_id>.py or <workload_id>/*.py)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--target", help="the TPU generation to compile and estimate for (default: the host's)")
    p.add_argument("--force", action="store_true", help="re-run attempts whose results are cached")
    p.add_argument("--jobs", type=int, help="attempts checked at once (default: the executor's slots)")
    p.add_argument(
        "--context",
        choices=["docs", "none"],
        help="the condition the attempts were made in (else what run.json / trajectory.json record)",
    )
    p.add_argument("--model", help="the model that made the attempts (else what run.json / trajectory.json record)")
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="check and profile on a Ray cluster of hosts (HEAD:6379); needs the fleet extra",
    )
    p.add_argument(
        "--host-slots",
        type=int,
        metavar="N",
        help="with --ray: checks each host runs at once (default: the host's own)",
    )
    p.add_argument("--json", action="store_true", help="print summary.json instead of the table")

    p = sub.add_parser(
        "estimate", help="static estimate of any function holding Pallas kernels (exit 0 when estimated)"
    )
    p.add_argument("function", metavar="FILE.py:FUNCTION", help="the function to estimate (the file runs sandboxed)")
    p.add_argument(
        "--args",
        required=True,
        help="comma-separated: bf16[8192,8192] (abstract), int32[4]=[1,2,3,4] "
        "(small, concrete), or a Python literal (a static argument)",
    )
    p.add_argument("--target", help="comma-separated TPU generations: v4,v5e,v5p,v6e,7x (default v6e)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "tune", help="compile every block-size variant, estimate, check the best few (exit 0 when one passes)"
    )
    p.add_argument("--workload", required=True, help="JAXBench id, e.g. 8p_GEMM")
    p.add_argument(
        "--kernel", required=True, type=Path, help="Python file defining workload(*inputs) and the block sizes"
    )
    p.add_argument(
        "--params",
        required=True,
        help="JSON: module-level names and their candidate values, e.g. '{\"BM\": [256, 512]}'",
    )
    p.add_argument("--target", help="the TPU generation to estimate for (default: the host's)")
    p.add_argument("--check-top", type=int, default=3, help="how many of the best variants to check for correctness")
    p.add_argument("--max-variants", type=int, default=48, help="at most this many variants are compiled")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("compare", help="per-workload difference of two evaluated runs (B against A)")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--chart", type=Path, help="also write a PNG scatter of the two runs' speedups here")

    p = sub.add_parser("workload", help="your own workloads: validate a module, task folder or directory")
    wsub = p.add_subparsers(dest="workload_command", required=True, parser_class=_Parser)
    v = wsub.add_parser(
        "validate",
        help="whether a custom workload can be checked (exit 0 when every entry is valid)",
    )
    v.add_argument("path", type=Path, metavar="FILE_OR_DIR")
    v.add_argument("--json", action="store_true")

    for name in _WITH_WORKLOADS:
        sub.choices[name].add_argument(
            "--workloads",
            action="append",
            type=Path,
            metavar="DIR",
            help="also serve the custom workloads in DIR (repeat for more; default: $JAXBENCH_MCP_WORKLOADS)",
        )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from jaxbench_mcp import api
    from jaxbench_mcp.catalog import docs, workloads
    from jaxbench_mcp.errors import AgentError

    if getattr(args, "workloads", None):
        missing = [str(d) for d in args.workloads if not d.is_dir()]
        if missing:
            _fail(f"--workloads: no directory at {', '.join(missing)}")
        # Through the environment: a check's worker inherits it and loads the same workloads.
        workloads.use_directories(args.workloads)
    if args.command not in ("workload", "compare", "info"):
        for broken in workloads.broken_workloads():
            sys.stderr.write(f"jaxbench-mcp: custom workload left out: {broken.message()}\n")

    # A mistake the user can fix (errors.AgentError) ends the command with its message, and so does a ValueError:
    # an operator's configuration (JAXBENCH_MCP_ISOLATION, JAXBENCH_MCP_SANDBOX_UIDS) is read as the command starts.
    agent_errors = (AgentError, ValueError)
    try:
        if args.command == "workload":
            from jaxbench_mcp.catalog import validation as workload_validation

            reports = workload_validation.validate(args.path)
            if args.json:
                import json

                print(json.dumps([r.as_dict() for r in reports], indent=2))
            else:
                print(workload_validation.reports_text(reports))
            sys.exit(0 if all(r.ok for r in reports) else 1)
        elif args.command == "list":
            _emit(api.list_workloads(tier=args.tier, operator=args.operator), args.json)
        elif args.command == "show":
            _emit(api.get_workload(args.workload_id, args.size), args.json)
        elif args.command == "info":
            bench = api.JaxBench.one_shot()
            _emit(bench.server_info(), args.json)
        elif args.command == "docs":
            if args.pack:
                page = docs.context_pack(workloads.get_workload(args.pack).id)
            else:
                page = docs.read_docs(topic=args.topic, query=args.search, page=args.page)
            _emit(page, args.json)
        elif args.command in ("check", "profile"):
            if not args.kernel.is_file():
                _fail(f"no kernel file at {args.kernel}")
            bench = api.JaxBench.one_shot()
            try:
                result: Verdict | Profile
                if args.command == "check":
                    result = verdict = bench.check_kernel(
                        args.workload,
                        args.kernel.read_text(),
                        args.target,
                        args.size,
                        args.seeds,
                        require_pallas=not args.allow_no_pallas,
                        config=args.config,
                    )
                else:
                    result = bench.profile_kernel(args.workload, args.kernel.read_text(), args.target)
                    verdict = result.verdict
            finally:
                bench.close()
            _emit(result, args.json)
            sys.exit(0 if verdict.status == "correct" else 1)
        elif args.command == "serve":
            _serve(args)
        elif args.command in ("evaluate", "compare"):
            _campaign(args)
        elif args.command in ("estimate", "tune"):
            from jaxbench_mcp.perf import tuning

            sys.exit(tuning.cli(args))
    except agent_errors as exc:
        _fail(str(exc))


def _campaign(args) -> None:
    from jaxbench_mcp.campaigns import campaign, report as campaign_report

    try:
        if args.command == "compare":
            print(campaign_report.compare(args.run_a, args.run_b, args.chart))
            return
        bench = _fleet_bench(args.ray, args.host_slots) if args.ray else None
        try:
            summary = campaign.evaluate(
                args.run_dir,
                bench,
                target=args.target,
                force=args.force,
                progress=campaign.ProgressBar(),
                jobs=args.jobs,
                context=args.context,
                model=args.model,
            )
        except KeyboardInterrupt:
            _fail(
                f"interrupted: the finished attempts are in {args.run_dir / campaign.RESULTS_FILE} and cached; "
                "run the same command again to resume",
                code=130,
            )
        finally:
            if bench is not None:
                bench.close()
        report = campaign_report.write_report(args.run_dir)
    except campaign.CampaignError as exc:
        _fail(str(exc))
    if args.json:
        print(summary.model_dump_json(indent=2))
    else:
        print(campaign.table(campaign.load(args.run_dir)[0]))
        print(summary.summary())
        print(f"report: {report}")


def _fleet_bench(address: str, host_slots: int | None = None):
    """A JaxBench whose executor is the Ray fleet at `address`, started (so that a missing cluster fails here)."""
    from jaxbench_mcp import api
    from jaxbench_mcp.store import Store

    try:
        from jaxbench_mcp.fleet import ray_executor as fleet
    except ImportError as exc:
        _fail(f"--ray needs the fleet extra (pip install 'jaxbench-mcp[fleet]'): {exc}")
    if importlib.util.find_spec("ray") is None:
        _fail("--ray needs Ray: pip install 'jaxbench-mcp[fleet]'")
    if host_slots is not None and host_slots < 1:
        _fail("--host-slots must be at least 1")
    store = Store()
    options = {"slots": host_slots} if host_slots else {}
    executor = fleet.RayExecutor(address, checker_options=options, cache=store)
    bench = api.JaxBench(store=store, executor=executor)
    try:
        bench.start()
    except fleet.FleetUnavailable as exc:
        bench.close()
        _fail(f"no fleet at {address}: {exc}")
    sys.stderr.write(f"jaxbench-mcp: fleet at {address}: {executor.describe()}\n")
    return bench


def _serve(args) -> None:
    from jaxbench_mcp import api
    from jaxbench_mcp.sandbox import jobs

    jobs.install_shutdown_handlers()  # SIGTERM / Ctrl-C: no worker or worker directory outlives the server
    from jaxbench_mcp.frontends.server import ServeRefused, build_server, http_security, serve_http, serve_stdio

    if args.transport == "http":
        try:
            security = http_security(args.host, args.token_file, args.allowed_host)
        except ServeRefused as exc:
            _fail(str(exc))
    elif args.token_file or args.allowed_host:
        _fail("--token-file and --allowed-host apply to --transport http only")
    if args.host_slots is not None and not args.ray:
        _fail("--host-slots applies to --ray only")
    if args.ray:
        # The fleet is started here, not in the server's lifespan: a cluster that is not there is said at once,
        # on stderr, with exit status 2. The lifespan's start() then finds it started.
        bench = _fleet_bench(args.ray, args.host_slots)
    else:
        bench = api.JaxBench()
    server = build_server(bench, show_expert_source=args.show_expert_source, context=args.context)
    if args.transport == "stdio":
        # Ctrl-C: the shutdown handlers above kill the workers and exit at once (the stdin reader would block a
        # clean exit). Over HTTP, uvicorn takes the signals while it runs and closes the server's lifespan.
        if sys.stdin.isatty():
            sys.stderr.write(
                "jaxbench-mcp: MCP server on stdio, waiting for an MCP client on stdin "
                "(an agent starts this command itself; Ctrl-C stops it)\n"
            )
        serve_stdio(server)
    else:
        serve_http(server, args.host, args.port, security)


if __name__ == "__main__":
    main()
