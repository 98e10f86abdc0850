"""Workload registry entries rendered as boundary models (what list/show/get_workload return)."""

from jaxbench_mcp import expert_refs, targets
from jaxbench_mcp.models import RooflineBound, SizeSpec, StaticArg, Tensor, WorkloadSpec, WorkloadSummary
from jaxbench_mcp.workloads import Workload

CANDIDATE_CONTRACT = (
    "A candidate is a Python file that defines `workload(*inputs)`: it takes exactly the inputs listed "
    "below, in order, and returns an array of the output's shape and dtype. It is traced and compiled at "
    "full size and run at small size, so derive block sizes from the input shapes."
)


def _jsonable(params: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def summarize(w: Workload) -> WorkloadSummary:
    return WorkloadSummary(
        id=w.id,
        tier=w.tier,
        model=w.model,
        operator=w.operator,
        sizes={name: _jsonable(params) for name, params in w.sizes.items()},
        has_expert_reference=w.has_expert_reference,
    )


def size_spec(w: Workload, size: str) -> SizeSpec:
    args = w.input_specs(size)
    inputs = [Tensor(name=a.name, shape=list(a.tensor.shape), dtype=a.tensor.dtype, bytes=a.tensor.nbytes) for a in args if a.tensor]
    outputs = [Tensor(shape=list(t.shape), dtype=t.dtype, bytes=t.nbytes) for t in w.output_specs(size)]
    flops = w.flops(size)
    in_bytes, out_bytes = sum(t.bytes for t in inputs), sum(t.bytes for t in outputs)
    # The roofline needs only jax's chip table, so every tier shows it.
    roofline = []
    for gen in targets.GENERATIONS:
        chip = targets.chip_facts(gen)
        seconds, bound = targets.roofline_seconds(flops, in_bytes + out_bytes, gen)
        roofline.append(
            RooflineBound(
                generation=gen,
                peak_bf16_tflops=chip.peak_bf16_flops / 1e12,
                hbm_gb_per_s=chip.hbm_bytes_per_second / 1e9,
                lower_bound_us=seconds * 1e6,
                bound_by=bound,
            )
        )
    return SizeSpec(
        size=size,
        params=_jsonable(w.size_params(size)),
        inputs=inputs,
        static_inputs=[StaticArg(name=a.name, value=repr(a.static_value)) for a in args if a.tensor is None],
        outputs=outputs,
        flops=flops,
        input_bytes=in_bytes,
        output_bytes=out_bytes,
        roofline=roofline,
    )


def workload_spec(w: Workload, size: str, show_expert_source: bool = False) -> WorkloadSpec:
    return WorkloadSpec(
        id=w.id,
        tier=w.tier,
        model=w.model,
        operator=w.operator,
        description=w.description,
        contract=CANDIDATE_CONTRACT,
        size=size_spec(w, size),
        other_sizes={name: _jsonable(p) for name, p in w.sizes.items() if name != size},
        notes=list(w.notes),
        degenerate_output=w.degenerate_output,
        has_expert_reference=w.has_expert_reference,
        reference_source=w.reference_source(),
        expert_source=expert_refs.expert_source(w.id) if show_expert_source else None,
    )
