"""The `jaxbench-mcp` command: each subcommand is one library call, printed as text or JSON."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

# The server process and the CLI never take a TPU: only a check's worker may hold the device.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

COMMANDS = ("list", "show", "info", "serve", "check", "profile", "docs")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, with close matches, and exit status 2."""

    def error(self, message: str) -> None:
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
    parser = _Parser(prog="jaxbench-mcp", description="Workloads, docs, checks and profiles for Pallas TPU kernels (JAXBench).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list the 50 workloads")
    p.add_argument("--tier", choices=["production", "kernelbench"])
    p.add_argument("--operator", help="substring of the operator name")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("show", help="what one workload must compute")
    p.add_argument("workload_id")
    p.add_argument("--size", choices=["small", "full"], default="small")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("info", help="the tier this host offers, versions, compile targets")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("serve", help="run the MCP server")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--show-expert-source", action="store_true",
                   help="let get_workload return the expert kernel's source (hidden by default, as in JAXBench)")

    p = sub.add_parser("check", help="compile and check a candidate kernel (exit 0 only when correct)")
    p.add_argument("--workload", required=True, help="JAXBench id, e.g. 8p_GEMM")
    p.add_argument("--kernel", required=True, type=Path, help="Python file defining workload(*inputs)")
    p.add_argument("--target", help="comma-separated TPU generations: v4,v5e,v5p,v6e,7x")
    p.add_argument("--size", choices=["small", "full"], help="size of the run stage")
    p.add_argument("--seeds", type=int, default=3, help="hidden seeds to run (1-16)")
    p.add_argument("--allow-no-pallas", action="store_true", help="do not require a pallas_call")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("profile", help="how fast a correct kernel is, next to XLA and the expert kernel (exit 0 when profiled)")
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
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from jaxbench_mcp import api, docs, targets, workloads

    agent_errors = (workloads.UnknownWorkload, workloads.UnknownSize, targets.UnknownTarget, docs.UnknownTopic, ValueError)
    try:
        if args.command == "list":
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
                if args.command == "check":
                    result = verdict = bench.check_kernel(args.workload, args.kernel.read_text(), args.target, args.size,
                                                          args.seeds, require_pallas=not args.allow_no_pallas)
                else:
                    result = bench.profile_kernel(args.workload, args.kernel.read_text(), args.target)
                    verdict = result.verdict
            finally:
                bench.close()
            _emit(result, args.json)
            sys.exit(0 if verdict.status == "correct" else 1)
        elif args.command == "serve":
            from jaxbench_mcp.server import build_server

            server = build_server(api.JaxBench(), show_expert_source=args.show_expert_source)
            if args.transport == "stdio":
                server.run("stdio")
            else:
                server.run("streamable-http", host=args.host, port=args.port)
    except agent_errors as exc:
        _fail(str(exc))


if __name__ == "__main__":
    main()
