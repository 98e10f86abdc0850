"""Checking a candidate: seeds, truth, the sandboxed job, the verdict and its diagnosis."""
