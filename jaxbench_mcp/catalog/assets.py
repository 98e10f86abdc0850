"""Where the data-like folders (workloads/, context_docs/, tokamax_refs/) live.

In a source checkout (or an editable install) they sit beside the package; a built wheel carries
them inside the package under _bundled/ (see pyproject.toml).
"""

from pathlib import Path

# The package's own folder (what a sandbox mounts for the worker, what a campaign's judge digest hashes): named
# here once, so that no module derives it from where it happens to sit in the package. This file is in catalog/.
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def asset_dir(name: str) -> Path:
    bundled = PACKAGE_DIR / "_bundled" / name
    if bundled.is_dir():
        return bundled
    beside = PACKAGE_DIR.parent / name
    if beside.is_dir():
        return beside
    raise FileNotFoundError(f"jaxbench-mcp is installed without its {name}/ folder (looked in {bundled} and {beside})")
