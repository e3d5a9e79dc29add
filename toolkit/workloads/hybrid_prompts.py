"""The scheduler benchmark's workload (`kvtk bench scheduler --core-only`): hybrid prompts over shared prefixes.

Requests draw prompts of several lengths, each starting with one of a few shared prefixes. Token ids are
arithmetic (prefix p's token i is `p * 10^7 + i`, request r's own token i is `(r + 1) * 10^8 + i`), so building
256 prompts of 32k tokens costs nothing next to the manager time the benchmark measures.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace

from toolkit.core import HybridGeometry, parse_groups_spec
from toolkit.workloads.traces import Trace, TraceRequest

# Added to every suffix token of wave 1, 2, ...: the replay wave shares the prefixes and nothing else.
WAVE_SUFFIX_SHIFT = 7_000_000_000


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """Sizes of one synthetic run (defaults: a hybrid FA + Mamba-align model, 256 concurrent requests)."""

    groups: str = "full_attention:16,mamba_align:64"
    dcp: int = 1
    num_requests: int = 256
    prompt_tokens: tuple[int, ...] = (8192, 16384, 32768)
    num_shared_prefixes: int = 8
    shared_prefix_tokens: int = 4096
    chunk_tokens: int = 4096
    decode_tokens: int = 2
    seed: int = 0

    def geometry(self) -> HybridGeometry:
        return HybridGeometry(groups=parse_groups_spec(self.groups), dcp=self.dcp)

    def prompts(self) -> list[tuple[str, list[int]]]:
        rng = random.Random(self.seed)
        out = []
        for index in range(self.num_requests):
            length = self.prompt_tokens[index % len(self.prompt_tokens)]
            prefix = rng.randrange(self.num_shared_prefixes)
            tokens = [prefix * 10_000_000 + i for i in range(min(self.shared_prefix_tokens, length))]
            tokens += [(index + 1) * 100_000_000 + i for i in range(length - len(tokens))]
            out.append((f"req{index}", tokens))
        return out


def wave_prompts(spec: WorkloadSpec, wave: int) -> Trace:
    """Wave `wave`'s requests (`w<wave>-req<i>`): the spec's prompts drawn with seed `spec.seed + wave`, suffixes
    shifted per wave (wave 0 fills the tier; wave 1 replays the shared prefixes with new suffixes and hits them).
    Each prompt is two inline parts, its shared prefix and its suffix; every request arrives at 0 and decodes
    `spec.decode_tokens` tokens. The ids are arithmetic, not a real vocabulary: `vocab_size` bounds them."""
    shift = wave * WAVE_SUFFIX_SHIFT
    vocab_size = 1 + max(  # the largest suffix token and the largest prefix token can be (see `prompts`)
        spec.num_requests * 100_000_000 + max(spec.prompt_tokens) + shift,
        spec.num_shared_prefixes * 10_000_000 + spec.shared_prefix_tokens,
    )
    trace = Trace(f"scheduler-bench-w{wave}", "scheduler-bench", vocab_size, params={**asdict(spec), "wave": wave})
    for request_id, tokens in replace(spec, seed=spec.seed + wave).prompts():
        shared = tuple(tokens[: spec.shared_prefix_tokens])
        suffix = tuple(t + shift for t in tokens[spec.shared_prefix_tokens :])
        trace.requests.append(TraceRequest(f"w{wave}-{request_id}", 0.0, (shared, suffix), spec.decode_tokens))
    return trace
