"""The one place that knows private jax and libtpu internals.

  pallas      what a traced pallas_call keeps (grid, BlockSpecs, scalar prefetch, scratch, compiler params,
              body, name), and the parameters of pl.kernel, DMA, run_scoped and program_id equations
  jaxpr       jax's names for primitive parameters: call, loop and branch bodies, scan trips, ref transforms
  tracebacks  what jax's own lines in a traceback look like
  libtpu      its dump flag, the formats of its schedule dumps, the sizes in its VMEM messages
  interpret   patches to jax's TPU interpreter (loads through ref views, masked stores), all-or-nothing
  hlo         XLA's HLO text (optimised, and jax's lowered text): the work around the kernels, loops' trips
  jaxpr_codec a recorded program as bytes and back (the trace job's files): pickle restricted to an allowlist
              of jax's classes, primitives rebound to jax's own objects

Every assumption about jax has a canary test (tests/test_internals_*.py, tests/test_jaxpr_codec.py) that fails
with "jax X changed Y: update Z" when an upgrade breaks it; libtpu's dump formats are checked on dumps it makes
(tests/test_estimate.py).
"""
