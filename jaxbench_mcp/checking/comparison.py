"""Comparing a candidate's outputs with the truth. Runs in a trusted process, never the candidate's."""

import numpy as np

# JAXBench's own check (harness/correctness.py): allclose on float32-cast outputs.
JAXBENCH_ATOL = 1e-2
JAXBENCH_RTOL = 1e-2


def jaxbench_allclose(candidate, baseline) -> bool:
    cand = np.asarray(candidate, dtype=np.float32)
    base = np.asarray(baseline, dtype=np.float32)
    return cand.shape == base.shape and bool(np.allclose(cand, base, atol=JAXBENCH_ATOL, rtol=JAXBENCH_RTOL))


def constant_output_passes(baseline) -> bool:
    """Whether all zeros, or the output's own mean everywhere, passes JAXBench's check."""
    base = np.asarray(baseline, dtype=np.float32)
    return jaxbench_allclose(np.zeros_like(base), base) or jaxbench_allclose(np.full_like(base, base.mean()), base)
