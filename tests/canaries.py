"""The shared form of a canary test for jaxbench_mcp.internals: a broken assumption about jax reads as
"jax <version> changed <what>: update <function>"."""

import contextlib

import jax
import pytest


@contextlib.contextmanager
def changed(what: str, function: str):
    """Turns a broken assumption (an assertion, or a parameter or attribute that is gone) into the canary's message."""
    try:
        yield
    except (AssertionError, KeyError, AttributeError, TypeError, IndexError, ValueError) as exc:
        pytest.fail(f"jax {jax.__version__} changed {what}: update {function} ({type(exc).__name__}: {exc})")
