"""The chaos soak's traffic (`toolkit.soak`): seeded waves of mixed requests (shared prefixes, repeats, one-off prompts), some marked
to be aborted while their copies are in flight, and the waves after which the device prefix cache is reset.

Pure Python and deterministic from the seed, so a reference run without the connector gets exactly the same
prompts, output lengths and waves. The generator, `soak_trace`, makes a `Trace` (each request an inline prompt that
also carries its wave, kind and abort mark); `build_waves` groups it into the waves the soak sends.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from toolkit.errors import BadInput
from toolkit.workloads.traces import Trace, TraceRequest


@dataclass(frozen=True, kw_only=True)
class SoakTraffic:
    """What one soak sends. Token counts are inclusive ranges; fractions are per request or per wave."""

    num_requests: int = 2000
    seed: int = 0
    wave_requests: tuple[int, int] = (4, 16)
    num_shared_prefixes: int = 6
    prefix_tokens: tuple[int, int] = (640, 1700)
    suffix_tokens: tuple[int, int] = (1, 500)
    one_off_tokens: tuple[int, int] = (1, 2400)
    repeat_fraction: float = 0.15  # an earlier prompt again, token for token (whole-prompt hits)
    one_off_fraction: float = 0.3  # a prompt sharing nothing (scan traffic that pushes the tier to evict)
    max_tokens: tuple[int, int] = (1, 12)
    abort_fraction: float = 0.05  # aborted while a load or store of theirs is in flight
    reset_fraction: float = 0.2  # waves followed by drain + reset_prefix_cache()
    max_model_len: int = 4096
    vocab_tokens: tuple[int, int] = (3, 2000)

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise BadInput(f"num_requests: must be >= 1, got {self.num_requests}")
        for name in ("wave_requests", "prefix_tokens", "suffix_tokens", "one_off_tokens", "max_tokens"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise BadInput(f"{name}: expected 1 <= low <= high, got {(low, high)}")
        for name in ("repeat_fraction", "one_off_fraction", "abort_fraction", "reset_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise BadInput(f"{name}: must be in [0, 1], got {value}")
        longest = self.prefix_tokens[1] + self.suffix_tokens[1]
        if max(longest, self.one_off_tokens[1]) + self.max_tokens[1] > self.max_model_len:
            raise BadInput(
                f"max_model_len: {self.max_model_len} tokens cannot hold the longest prompt "
                f"({max(longest, self.one_off_tokens[1])}) plus {self.max_tokens[1]} output tokens"
            )


@dataclass(frozen=True, kw_only=True)
class SoakRequest(TraceRequest):
    """A soak request: its prompt is its one inline part; it belongs to wave `wave`."""

    wave: int
    kind: str  # "shared", "repeat" or "one-off"
    abort: bool  # abort it once a load or store of its own is in flight

    @property
    def prompt_token_ids(self) -> tuple[int, ...]:
        (tokens,) = self.parts
        assert isinstance(tokens, tuple)  # inline tokens, never a segment id
        return tokens


@dataclass
class SoakTrace(Trace):
    """The soak's requests in sending order, and the waves after which the device prefix cache is reset."""

    reset_after_waves: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class SoakWave:
    requests: tuple[SoakRequest, ...]
    reset_after: bool


def build_waves(traffic: SoakTraffic) -> list[SoakWave]:
    """`soak_trace`'s requests grouped by wave, in order."""
    trace = soak_trace(traffic)
    waves: dict[int, list[SoakRequest]] = {}
    for request in trace.requests:
        assert isinstance(request, SoakRequest)
        waves.setdefault(request.wave, []).append(request)
    return [SoakWave(tuple(requests), wave in trace.reset_after_waves) for wave, requests in waves.items()]


def soak_trace(traffic: SoakTraffic) -> SoakTrace:
    """The soak's traffic as a trace: waves of shared-prefix, repeated and one-off prompts (see `SoakTraffic`)."""
    rng = random.Random(traffic.seed)
    low, high = traffic.vocab_tokens

    def tokens(count: int) -> list[int]:
        return [rng.randrange(low, high) for _ in range(count)]

    prefixes = [tokens(rng.randint(*traffic.prefix_tokens)) for _ in range(traffic.num_shared_prefixes)]
    # Zipf-like popularity: a few hot prefixes and a tail that the eviction policy has to choose against.
    weights = [1.0 / (rank + 1) for rank in range(len(prefixes))]
    sent: list[tuple[int, ...]] = []
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(traffic).items()}
    trace = SoakTrace(f"soak-{traffic.num_requests}", "soak", traffic.vocab_tokens[1], params=params)
    index = wave = 0
    while index < traffic.num_requests:
        size = min(rng.randint(*traffic.wave_requests), traffic.num_requests - index)
        for _ in range(size):
            draw = rng.random()
            if sent and draw < traffic.repeat_fraction:
                kind, prompt = "repeat", sent[rng.randrange(len(sent))]
            elif draw < traffic.repeat_fraction + traffic.one_off_fraction or not prefixes:
                kind, prompt = "one-off", tuple(tokens(rng.randint(*traffic.one_off_tokens)))
            else:
                prefix = rng.choices(prefixes, weights)[0]
                kind, prompt = "shared", tuple(prefix + tokens(rng.randint(*traffic.suffix_tokens)))
            sent.append(prompt)
            max_tokens = rng.randint(*traffic.max_tokens)
            abort = rng.random() < traffic.abort_fraction
            trace.requests.append(
                SoakRequest(
                    request_id=f"s{index}",
                    arrival_s=0.0,
                    parts=(prompt,),
                    max_tokens=max_tokens,
                    wave=wave,
                    kind=kind,
                    abort=abort,
                )
            )
            index += 1
        if rng.random() < traffic.reset_fraction:
            trace.reset_after_waves |= {wave}
        wave += 1
    return trace
