"""A jaxbench-mcp server that dies on its first check: `python tests/dying_server.py COMMAND... serve ...` runs
the real server (COMMAND...) behind a stdio relay that kills it, and exits without an answer, as soon as a
check_kernel or profile_kernel call comes in. Everything else (initialize, tools/list) is the real server's.
The verifiers environment's test uses it as the machinery failing mid-rollout (a dead server, a lost host)."""

import json
import subprocess
import sys
import threading


def main() -> None:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def relay_out() -> None:
        for line in child.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    threading.Thread(target=relay_out, daemon=True).start()
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            message = {}
        if message.get("method") == "tools/call" and message.get("params", {}).get("name") in {
            "check_kernel",
            "profile_kernel",
        }:
            child.kill()
            child.wait()
            sys.exit(1)
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
