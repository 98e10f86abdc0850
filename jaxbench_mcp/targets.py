"""`jaxbench_mcp.targets`, a public path (expert references and custom workloads import chip_facts_visible from
it): the module is jaxbench_mcp.catalog.targets."""

import sys

from jaxbench_mcp.catalog import targets as _targets

# The same module object under the old name, so that what a workload reads or patches here is what the package uses.
sys.modules[__name__] = _targets
