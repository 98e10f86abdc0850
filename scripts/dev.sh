#!/usr/bin/env bash
# Set up a virtual environment in .venv (Python >= 3.12) and run the server or the tests.
#   scripts/dev.sh serve [serve options]   set up, then start the MCP server (stdio by default)
#   scripts/dev.sh test [pytest options]   set up with the test extra, lint and type-check, then run the whole
#                                          test suite (what CI runs)
#   scripts/dev.sh test-fast [options]     the same set-up, then only the tests not marked slow (under a minute)
#
# The set-up is idempotent: it installs only when .venv is missing, pyproject.toml changed since the last
# install, or the test extra is wanted and was not installed. Otherwise it touches nothing (and so needs no
# package index). Everything this script says goes to stderr: with `serve`, stdout belongs to MCP.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "dev.sh: $*" >&2; }

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
    say "needs Python 3.12 or newer on PATH (or installed with pyenv)"
    exit 1
}

command=${1:-}
shift || true
case "$command" in
    serve) extras="" ;;
    test|test-fast) extras="test" ;;
    *) echo "usage: scripts/dev.sh serve|test|test-fast [options]" >&2; exit 2 ;;
esac

# Candidate kernels run inside bubblewrap when it is installed (else a weaker isolation, which server_info and
# every verdict name). Install it where we can without asking: as root, with apt and a reachable index.
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing bubblewrap (the sandbox for candidate kernels)"
        { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >&2 \
            || say "could not install bubblewrap: candidates will run with a weaker isolation"
    else
        say "bubblewrap (bwrap) is not installed: candidates run with a weaker isolation; install the 'bubblewrap' package"
    fi
fi

# The stamp holds the hash of pyproject.toml and the extras installed with it.
stamp=.venv/.jaxbench-installed
want_hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
installed_hash="" installed_extras=""
if [ -f "$stamp" ]; then
    read -r installed_hash installed_extras <"$stamp" || true
fi

if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    $(find_python) -m venv .venv >&2
fi
if [ ! -x .venv/bin/jaxbench-mcp ] || [ "$installed_hash" != "$want_hash" ] \
        || { [ -n "$extras" ] && [ "$installed_extras" != "$extras" ]; }; then
    # A test install covers serve too: once the test extra is in, keep it in.
    if [ "$installed_extras" = "test" ]; then extras="test"; fi
    say "installing jaxbench-mcp${extras:+ with the $extras extra} into .venv (pyproject.toml is new or changed; the first time downloads jax, libtpu and the MCP SDK)"
    # Installer chatter goes to stderr too.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}" >&2
    echo "$want_hash $extras" >"$stamp"
else
    say ".venv is up to date with pyproject.toml; nothing to install"
fi

# The verifiers environment (environments/jaxbench) needs a venv of its own: every verifiers release pins an
# mcp that conflicts with ours. The tests make it (idempotent, stamped with the hash of its pyproject.toml);
# the checkout goes on its path through a .pth file, with no dependencies, for jaxbench_mcp.campaigns.outcomes.
setup_verifiers_venv() {
    local venv=.venv-verifiers env_hash start=$SECONDS
    env_hash=$(sha256sum environments/jaxbench/pyproject.toml | cut -d' ' -f1)
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.jaxbench-installed" 2>/dev/null)" = "$env_hash" ]; then
        say "$venv is up to date with environments/jaxbench/pyproject.toml; nothing to install"
    else
        say "installing the verifiers environment into $venv (environments/jaxbench/pyproject.toml is new or changed)"
        [ -x "$venv/bin/python" ] || $(find_python) -m venv "$venv" >&2
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e environments/jaxbench >&2
        echo "$env_hash" >"$venv/.jaxbench-installed"
        say "$venv installed in $((SECONDS - start)) s"
    fi
    # Written each time, so that the venv follows the checkout it belongs to.
    echo "$PWD" >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/jaxbench-checkout.pth"
}
if [ "$command" = test ] || [ "$command" = test-fast ]; then setup_verifiers_venv; fi

case "$command" in
    serve)
        if [[ " $* " == *" http "* || " $* " == *"--transport=http"* ]]; then
            say "starting the MCP server over HTTP (Ctrl-C stops it)"
        else
            say "starting the MCP server on stdio: it now waits for an MCP client on stdin (an agent starts this command itself). Ctrl-C stops it."
        fi
        exec .venv/bin/jaxbench-mcp serve "$@" ;;
    test)
        say "ruff (lint and format) and mypy (types)"
        .venv/bin/ruff check .
        .venv/bin/ruff format --check .
        .venv/bin/mypy
        exec .venv/bin/python -m pytest "$@" ;;
    test-fast) exec .venv/bin/python -m pytest -m "not slow" "$@" ;;
esac
