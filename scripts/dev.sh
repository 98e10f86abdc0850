#!/usr/bin/env bash
# Set up a virtual environment in .venv (Python >= 3.12) and run the server or the tests.
#   scripts/dev.sh serve [serve options]   install, then start the MCP server (stdio by default)
#   scripts/dev.sh test [pytest options]   install with the test extra, then run the test suite
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$candidate"; return
        fi
    done
    # pyenv keeps other versions installed but not on PATH: pick the newest 3.12+.
    if command -v pyenv >/dev/null 2>&1; then
        local version
        version=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9]|[2-9][0-9])(\.[0-9]+)?$' | sort -V | tail -n 1 || true)
        if [ -n "$version" ]; then
            echo "env PYENV_VERSION=$version python${version%.*}"; return
        fi
    fi
    echo "scripts/dev.sh: needs Python 3.12 or newer on PATH (or installed with pyenv)" >&2
    exit 1
}

command=${1:-}
shift || true
case "$command" in
    serve) extras="" ;;
    test) extras="[test]" ;;
    *) echo "usage: scripts/dev.sh serve|test [options]" >&2; exit 2 ;;
esac

if [ ! -x .venv/bin/python ]; then
    $(find_python) -m venv .venv >&2
fi
# Installer chatter goes to stderr: in `serve` stdout belongs to the MCP protocol.
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras}" >&2

case "$command" in
    serve) exec .venv/bin/jaxbench-mcp serve "$@" ;;
    test) exec .venv/bin/python -m pytest "$@" ;;
esac
