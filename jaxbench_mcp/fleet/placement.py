"""Placement: which host of the fleet takes a job (pure: the proxy's host table in, one host out), and what
server_info shows of the fleet. Used by the proxy (jaxbench_mcp.fleet.proxy), which places every job, and by the
executor (jaxbench_mcp.fleet.ray_executor), which describes the fleet from the hosts the proxy last reported.

Placement by target: a job for a list of TPU generations goes to a ready host whose attached chip is one of them
(the first in the list that the fleet has), whose profile is then measured; else to any host that can compile
for TPU (a CPU host with libtpu, whose profile is a static estimate). Among the candidates the least loaded
host wins (in-flight jobs per slot), then the one used longest ago. A job without targets takes the fleet's
default target (the chip most TPU hosts carry, else v6e). A fleet where no host can serve a requested target
says so at once (NoHostForTarget, an error the agent can fix) instead of queueing the job.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from jaxbench_mcp.catalog import targets
from jaxbench_mcp.models import FleetHost, FleetInfo

# The custom resource a CPU host advertises to join the fleet (a TPU host may advertise Ray's TPU resource instead).
HOST_RESOURCE = "jaxbench_host"
TPU_RESOURCE = "TPU"

_TIER_RANK = {str(targets.Tier.TPU): 2, str(targets.Tier.CPU_LIBTPU): 1, str(targets.Tier.CPU): 0}


class FleetUnavailable(RuntimeError):
    """The fleet cannot take a job: no cluster at the address, no host in it, or every host gone while this host
    cannot take the job over. The message says which."""


class NoLiveHost(FleetUnavailable):
    """No host of the fleet is up right now (the cluster itself may be)."""


class NoHostForTarget(targets.UnknownTarget):
    """No host of the fleet can serve the requested TPU generation(s); raised before anything is queued."""


@dataclass
class HostView:
    """What placement and server_info know of one host."""

    node_id: str
    name: str
    state: str = "starting"  # starting | ready | dead | refused
    tier: str | None = None
    attached_tpu: str | None = None
    tpu_chips: int = 0
    slots: int = 1
    isolation: str | None = None
    inflight: int = 0  # jobs this fleet has placed on the host and not yet got back
    last_used: int = 0  # placement order, for the tie-break
    detail: str = ""

    def public(self, running: int = 0, waiting: int = 0) -> FleetHost:
        return FleetHost(
            name=self.name,
            node_id=self.node_id,
            state=self.state,
            tier=self.tier,
            attached_tpu=self.attached_tpu,
            tpu_chips=self.tpu_chips,
            slots=self.slots,
            running=running,
            waiting=waiting,
            in_flight=self.inflight,
            isolation=self.isolation,
            detail=self.detail,
        )


def place(hosts: list[HostView], generations: list[str], exclude: set[str] | frozenset[str] = frozenset()) -> HostView:
    """The host for a job for `generations` (TPU generations; empty: no compile target), skipping node ids in
    `exclude`.

    Raises NoLiveHost when no host is ready, NoHostForTarget when ready hosts exist but none can compile for TPU."""
    live = [h for h in hosts if h.state == "ready" and h.node_id not in exclude]
    if not live:
        down = [f"{h.name} ({h.state}{': ' + h.detail if h.detail else ''})" for h in hosts]
        raise NoLiveHost(
            "no host of the fleet is up" + (f"; hosts: {'; '.join(down)}" if down else " (the cluster has none)")
        )
    pool = live
    if generations:
        # A plain CPU host (no libtpu) lowers for TPU but compiles for no generation.
        able = [h for h in live if h.tier != str(targets.Tier.CPU)]
        if not able:
            raise NoHostForTarget(
                f"no host of the fleet can compile for {', '.join(generations)}: its hosts "
                f"({', '.join(h.name for h in live)}) are plain CPU hosts without libtpu. Omit the target for a "
                "lowering-only check, or add a host with libtpu or a TPU to the fleet"
            )
        pool = able
        for generation in generations:  # the first requested generation that some host carries decides
            carriers = [h for h in able if h.attached_tpu == generation]
            if carriers:
                pool = carriers
                break
    return min(pool, key=lambda h: (h.inflight / max(1, h.slots), h.last_used))


def fleet_tier(hosts: list[HostView], ready_only: bool = True) -> targets.Tier | None:
    """The best tier a (ready) host offers: what a job for the fleet's default target gets."""
    tiers = [h.tier for h in hosts if (h.state == "ready" or not ready_only) and h.tier]
    return targets.Tier(max(tiers, key=_TIER_RANK.__getitem__)) if tiers else None


def fleet_default_target(hosts: list[HostView]) -> str | None:
    ready = [h for h in hosts if h.state == "ready"]
    chips = collections.Counter(h.attached_tpu for h in ready if h.attached_tpu)
    if chips:
        return chips.most_common(1)[0][0]
    return targets.DEFAULT_CPU_TARGET if any(h.tier == str(targets.Tier.CPU_LIBTPU) for h in ready) else None


def fleet_info(
    address: str, hosts: list[HostView], queues: dict[str, tuple[int, int]], fallback: str | None
) -> FleetInfo:
    """server_info's view of the fleet; `queues` maps node id -> (running, waiting) as the hosts last said."""
    public = [h.public(*queues.get(h.node_id, (0, 0))) for h in hosts]
    ready = [h for h in public if h.state == "ready"]
    slots = sum(h.slots for h in ready)
    chips: dict[str, int] = {}
    for h in ready:
        if h.attached_tpu:
            chips[h.attached_tpu] = chips.get(h.attached_tpu, 0) + h.tpu_chips
    return FleetInfo(
        address=address,
        resource=HOST_RESOURCE,
        hosts=public,
        ready_hosts=len(ready),
        tpu_chips=sum(h.tpu_chips for h in ready),
        chips_by_generation=chips,
        queue_length=sum(h.waiting for h in ready),
        busy_share=(sum(h.running for h in ready) / slots) if slots else 0.0,
        fallback=fallback,
    )
