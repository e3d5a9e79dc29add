"""Write amplification of each disk write policy on a synthetic block stream (the second table of
`kvtk bench tiers`): a CPU tier (LRU, `cpu_blocks`) above a disk tier (LRU, `disk_blocks`), the decisions made by
the disk tier's own `should_write`.

The stream: `accesses` block reads, a share `one_shot` of them blocks never seen again (a prompt's unique tail),
the rest drawn from `universe` reused blocks with Zipf(`zipf_s`) popularity. A read hits the CPU tier, else loads
from disk (promoted to the CPU tier), else is computed and stored in the CPU tier. Reported per policy: blocks
written to disk, blocks loaded from it, write amplification = written / loaded, and the share of reads served from
disk. A model of the policy's effect, not a trace: the connector cascade will report the same counters live.
"""

from __future__ import annotations

import bisect
import random
from collections import OrderedDict
from dataclasses import dataclass
from itertools import accumulate

from toolkit.tiers.disk.policy import CpuTierEvent, WritePolicy, should_write


@dataclass(frozen=True, slots=True)
class StreamSpec:
    accesses: int = 200_000
    universe: int = 20_000
    zipf_s: float = 0.9
    one_shot: float = 0.3
    cpu_blocks: int = 2_000
    disk_blocks: int = 12_000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PolicyRow:
    policy: str
    written: int
    loaded: int
    disk_hit_share: float

    @property
    def write_amplification(self) -> float | None:
        return self.written / self.loaded if self.loaded else None


def stream(spec: StreamSpec) -> list[int]:
    """Block ids: reused ones in [0, universe), one-shot ones from universe up, each used once."""
    rng = random.Random(spec.seed)
    weights = list(accumulate(1.0 / (rank + 1) ** spec.zipf_s for rank in range(spec.universe)))
    out, fresh = [], spec.universe
    for _ in range(spec.accesses):
        if rng.random() < spec.one_shot:
            out.append(fresh)
            fresh += 1
        else:
            out.append(bisect.bisect_left(weights, rng.random() * weights[-1]))
    return out


def simulate(policy: WritePolicy, blocks: list[int], spec: StreamSpec) -> PolicyRow:
    cpu: OrderedDict[int, int] = OrderedDict()  # block -> hits while in the CPU tier
    disk: OrderedDict[int, None] = OrderedDict()
    written = loaded = 0

    def write(block: int) -> None:
        nonlocal written
        if block in disk:
            return
        written += 1
        disk[block] = None
        if len(disk) > spec.disk_blocks:
            disk.popitem(last=False)

    def admit(block: int) -> None:
        cpu[block] = 0
        if should_write(policy, CpuTierEvent.STORED, 0):
            write(block)
        if len(cpu) > spec.cpu_blocks:
            victim, hits = cpu.popitem(last=False)
            if should_write(policy, CpuTierEvent.EVICTED, hits):
                write(victim)

    for block in blocks:
        if block in cpu:
            cpu[block] += 1
            cpu.move_to_end(block)
        elif block in disk:
            loaded += 1
            disk.move_to_end(block)
            admit(block)
            cpu[block] = 1  # it was reused: a load from disk counts as a hit for the policy
        else:
            admit(block)
    return PolicyRow(policy.value, written, loaded, loaded / len(blocks))


def policy_table(spec: StreamSpec) -> list[PolicyRow]:
    blocks = stream(spec)
    return [simulate(policy, blocks, spec) for policy in WritePolicy]
