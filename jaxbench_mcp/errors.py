"""Whose fault an exception is. An AgentError is a mistake in a request that its sender (an agent over MCP, a
person at the CLI) can fix, and its message says how: the frontends show it as the answer (a tool error, a
one-line CLI failure) and record no server failure. Every other exception is the server's fault.

Each AgentError also keeps the built-in class it has always been (KeyError for an unknown workload, ValueError
for a bad argument), so that code catching those still does.
"""


class AgentError(Exception):
    """A mistake the caller can fix; the message says what to do."""


class BadRequest(AgentError, ValueError):
    """A request argument out of range (the message says the allowed range)."""


class UnknownAttempt(AgentError, LookupError):
    """No attempt has the id asked for."""


class WorkloadDefinitionError(ValueError):
    """A module in workloads/ breaks the workload contract (a fault of the workload's author, found when the
    workloads are loaded, not of a request)."""

    def __init__(self, path, field: str, problem: str):
        super().__init__(f"{path.name}: {field}: {problem}")
        self.path, self.field, self.problem = path, field, problem
