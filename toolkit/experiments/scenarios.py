"""Named scenarios: the setups the seed change (vLLM #54735/#54736, SimpleCPU) was validated with, in the dry engine.

    kvtk replay --scenario list              # name and one line each
    kvtk replay --scenario gsm8k-20shot      # run it; other flags override (--max-requests 64 for a quick run)

Every scenario runs the toolkit with fine-grained hits on, the same with them off (`no_fine_grained`) and vLLM's
SimpleCPU (`simplecpu`), and prints the phase table with the three side by side (`format_side_by_side`).

Choices the seed's write-up does not pin down:
- the seed's Kimi-K3 has no preset; Kimi-Linear-48B-A3B (MLA + KDA, the same MLA/DCP rules) stands in for it at its
  TP8/DCP8, with the seed's 512 device blocks for the workloads and 32 for the deterministic run that evicts;
- Qwen3.5 runs as its 4B preset at TP8/DCP2 (`--model qwen3.5-27b` runs the same scenario at 27B);
- GSM8K 20-shot: GSM8K's usual 8-shot prompt is about 1,000 tokens, so 20 shots are about 2,600 tokens of shared
  prefix; a question is about 100 tokens; 1,319 questions (the test split); answers cut at 128 tokens;
- the agentic workload: 32 sessions x 8 turns on a 2,000-token system prompt (tool definitions), 300-token user
  messages and assistant answers, answers of 64 tokens, 16 clients.

At full size each takes seconds to minutes on two busy CPU cores (measured: the seed runs about 15 s each,
agentic-multiturn 27 s, gsm8k-20shot 1 min 44 s, all three variants and four phases); the seed runs are
deterministic (two runs give the same tokens and modelled times).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.errors import BadInput

if TYPE_CHECKING:
    from toolkit.experiments.config import ExperimentConfig

BASELINES = ("no_fine_grained", "simplecpu")
SEED_TRACE = "agentic:num_sessions=4,num_turns=4,system_tokens=3000,user_tokens=300,assistant_tokens=200,max_tokens=4"
GSM8K_TRACE = "fewshot:num_requests=1319,prefix_tokens=2600,question_tokens=100,max_tokens=128"
AGENTIC_TRACE = (
    "agentic:num_sessions=32,num_turns=8,system_tokens=2000,user_tokens=300,assistant_tokens=300,max_tokens=64"
)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A name, one line of description, and the `ExperimentConfig` fields it sets (the rest keep their defaults)."""

    name: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)

    def config(self, **overrides: Any) -> ExperimentConfig:
        """The experiment this scenario runs; `overrides` (`ExperimentConfig.from_params` parameters, the command
        line's spellings included) win over its settings. Hash unit 0: vLLM's default, the presets' own."""
        from toolkit.experiments.config import ExperimentConfig

        return ExperimentConfig.from_params(
            {"baselines": BASELINES, "prefix_match_unit": 0, **self.settings, **overrides}
        )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="seed-kimi-linear-tp8-dcp8",
            description="deterministic cold/hot/pressure/replay, Kimi-Linear-48B-A3B TP8/DCP8, 32 device blocks, "
            "4 x 4 agentic turns one at a time",
            settings={"model": "kimi-linear-48b-a3b", "tp": 8, "dcp": 8, "device_blocks": 32, "trace": SEED_TRACE},
        ),
        Scenario(
            name="seed-qwen3.5-tp8-dcp2",
            description="deterministic cold/hot/pressure/replay, Qwen3.5-4B TP8/DCP2, 32 device blocks, "
            "4 x 4 agentic turns one at a time",
            settings={"model": "qwen3.5-4b", "tp": 8, "dcp": 2, "device_blocks": 32, "trace": SEED_TRACE},
        ),
        Scenario(
            name="gsm8k-20shot",
            description="GSM8K-shaped 20-shot few-shot (1,319 questions, 2,600-token shared prefix), 64 clients, "
            "Kimi-Linear TP8/DCP8, 512 device blocks",
            settings={
                "model": "kimi-linear-48b-a3b",
                "tp": 8,
                "dcp": 8,
                "device_blocks": 512,
                "trace": GSM8K_TRACE,
                "concurrency": 64,
            },
        ),
        Scenario(
            name="agentic-multiturn",
            description="agentic multi-turn (32 sessions x 8 turns, shared 2,000-token system prompt), 16 clients, "
            "Kimi-Linear TP8/DCP8, 512 device blocks",
            settings={
                "model": "kimi-linear-48b-a3b",
                "tp": 8,
                "dcp": 8,
                "device_blocks": 512,
                "trace": AGENTIC_TRACE,
                "concurrency": 16,
            },
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise BadInput(f"scenario: unknown scenario {name!r}; valid: list, {', '.join(SCENARIOS)}") from None


def format_scenario_list() -> str:
    width = max(len(n) for n in SCENARIOS)
    return "\n".join(f"{s.name:<{width}}  {s.description}" for s in SCENARIOS.values())


def format_side_by_side(summary: dict[str, Any]) -> str:
    """One row per phase: each variant's device-local, CPU-tier and recomputed tokens, next to each other."""
    variants = list(dict.fromkeys(p["variant"] for p in summary["phases"]))
    by = {(p["variant"], p["phase"]): p for p in summary["phases"]}
    phases = list(dict.fromkeys(p["phase"] for p in summary["phases"]))
    col = 30
    lines = [
        f"{'':<9}{'oracle':>10}" + "".join(f"{v:>{col}}" for v in variants),
        f"{'phase':<9}{'tokens':>10}" + "".join(f"{'local / cpu-tier / recomp':>{col}}" for _ in variants),
    ]
    for phase in phases:
        oracle = (summary.get("oracle_reusable_tokens") or {}).get(phase, "")
        cells = []
        for v in variants:
            p = by.get((v, phase))
            cells.append(
                "-" if p is None else f"{p['local_hit_tokens']} / {p['external_hit_tokens']} / {p['recomputed_tokens']}"
            )
        lines.append(f"{phase:<9}{oracle:>10}" + "".join(f"{c:>{col}}" for c in cells))
    return "\n".join(lines)
