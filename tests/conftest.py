import json
import os
from pathlib import Path

# Tests run on the CPU even on a host with libtpu: the server process itself never takes the TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

DATA_DIR = Path(__file__).parent / "data"
FACTS = {w["id"]: w for w in json.loads((DATA_DIR / "jaxbench_facts.json").read_text())["workloads"]}
