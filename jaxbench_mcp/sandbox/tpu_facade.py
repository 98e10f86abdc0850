"""While a candidate's Python runs in the worker (its import and its traces), platform queries answer as on a TPU.

A candidate that computes the right thing when it sees a CPU and something else on a TPU (keyed on
`jax.default_backend()`, `jax.devices()`, or `TPU_ACCELERATOR_TYPE`) would otherwise show the CPU branch to every
stage of a CPU host's check. Under the facade those queries name the target chip, so the branch a TPU would take is
the one traced, lowered, compiled and run. The candidate's Python runs only inside this window (the worker derives
everything else from the recorded traces), so nothing it defers to later can ask again.

Deeper probes are not disguised (jax's config object, backend clients, /dev/accel* files); README's threat model
says so. Every query answered is recorded, and the verdict names them.
"""

from __future__ import annotations

import dataclasses
import os

import jax

# What a TPU VM's environment holds that a CPU host's lacks; values name the target chip.
_ENV = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "JAX_PLATFORMS")
_ACCELERATOR_TYPE = {"v4": "v4-8", "v5e": "v5litepod-1", "v5p": "v5p-8", "v6e": "v6e-1", "7x": "tpu7x-2"}


@dataclasses.dataclass(frozen=True)
class FacadeDevice:
    """What `jax.devices()` returns under the facade: a TPU device's public attributes, nothing to run on."""

    device_kind: str
    num_cores: int
    id: int = 0
    platform: str = "tpu"
    process_index: int = 0
    host_id: int = 0
    coords: tuple[int, int, int] = (0, 0, 0)
    core_on_chip: int = 0

    def __str__(self) -> str:
        return f"TPU_{self.id}(process={self.process_index},(0,0,0,0))"


class TpuFacade:
    """Context manager: jax's platform queries and the TPU environment variables answer as on `generation`."""

    def __init__(self, generation: str, device_kind: str, cores: int):
        self.generation = generation
        self.device = FacadeDevice(device_kind=device_kind, num_cores=cores)
        self.queries: list[str] = []
        self._saved: dict = {}
        self._saved_env: dict[str, str | None] = {}

    def _answer(self, name: str, value):
        def query(*_args, **_kwargs):
            if name not in self.queries:
                self.queries.append(name)
            return value() if callable(value) else value

        return query

    def __enter__(self) -> TpuFacade:
        answers = {
            "default_backend": "tpu",
            "devices": lambda: [self.device],
            "local_devices": lambda: [self.device],
            "device_count": 1,
            "local_device_count": 1,
        }
        for name, value in answers.items():
            self._saved[name] = getattr(jax, name)
            setattr(jax, name, self._answer(f"jax.{name}()", value))
        env = {
            "TPU_ACCELERATOR_TYPE": _ACCELERATOR_TYPE.get(self.generation, self.generation),
            "TPU_NAME": "local",
            "JAX_PLATFORMS": "tpu",
        }
        for key in _ENV:
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = env[key]
        return self

    def __exit__(self, *_exc) -> None:
        for name, value in self._saved.items():
            setattr(jax, name, value)
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
