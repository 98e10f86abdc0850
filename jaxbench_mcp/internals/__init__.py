"""The one place that knows private jax, libtpu and tokamax internals.

  libtpu     its dump flag, the formats of its schedule dumps, the sizes in its VMEM messages
  interpret  patches to jax's TPU interpreter (loads through ref views, masked stores), all-or-nothing

Every assumption has a canary test (tests/test_internals_*.py) that fails with "jax X changed Y: update Z"
when an upgrade breaks it.
"""
