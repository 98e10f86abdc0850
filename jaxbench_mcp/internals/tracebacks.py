"""What jax's own lines in a traceback look like (its frames' module path and its note on traceback filtering)."""


def is_jax_noise(line: str) -> bool:
    """A line of jax's own internals, or its note on traceback filtering: noise in an error shown to an agent."""
    return "jax._src" in line or "JAX_TRACEBACK_FILTERING" in line
