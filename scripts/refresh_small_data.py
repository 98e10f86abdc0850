"""Rewrite the small-size test data after a workload's SIZES["small"] changes.

- tests/data/seed42_small_digests.json: the digest of every input of create_inputs("small", seed=42),
  computed exactly as tests/test_seeds.py computes it.
- tests/data/jaxbench_facts.json: the "small" entry of each workload (params, input and output shapes
  and dtypes); the "full" entries are JAXBench's facts and are left untouched.

Usage: .venv/bin/python scripts/refresh_small_data.py [WORKLOAD_ID ...]   (default: every workload)
Only the named workloads are rewritten; review the diff before committing.
"""

import datetime
import hashlib
import json
import sys
from pathlib import Path

import jax
import numpy as np

from jaxbench_mcp.catalog import workloads

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def digest(inputs) -> list[str]:
    return [
        hashlib.sha256(np.asarray(x).tobytes()).hexdigest()[:16] if hasattr(x, "shape") else repr(x) for x in inputs
    ]


def small_facts(w) -> dict:
    arrays = [a for a in w.input_specs("small") if a.tensor is not None]
    return {
        "params": w.size_params("small"),
        "inputs": [{"shape": list(a.tensor.shape), "dtype": a.tensor.dtype} for a in arrays],
        "outputs": [{"shape": list(o.shape), "dtype": o.dtype} for o in w.output_specs("small")],
    }


def main(ids: list[str]) -> None:
    chosen = [workloads.get_workload(i) for i in ids] if ids else workloads.all_workloads()
    digests_path, facts_path = DATA / "seed42_small_digests.json", DATA / "jaxbench_facts.json"
    digests = json.loads(digests_path.read_text())
    facts = json.loads(facts_path.read_text())
    by_id = {entry["id"]: entry for entry in facts["workloads"]}
    for w in chosen:
        digests["digests"][w.id] = digest(w.create_inputs("small", seed=42))
        fresh = small_facts(w)
        # Tuples in SIZES (scenario lists) are stored as JSON lists, as before.
        by_id[w.id]["small"] = json.loads(json.dumps(fresh))
        print(w.id, "refreshed")
    digests["refreshed"] = (
        f"{datetime.date.today().isoformat()} with jax {jax.__version__}: small sizes re-derived "
        "to keep the full sizes' divisibility (workloads.keeps_divisibility); the digests of "
        "the refreshed workloads come from the same JAXBench constructions at the new sizes"
    )
    digests_path.write_text(json.dumps(digests, indent=1))
    facts_path.write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
