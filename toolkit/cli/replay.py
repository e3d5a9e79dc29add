"""`kvtk replay`: cold / hot / pressure / replay on a trace, for the toolkit and its baselines (dry, live or a
running server). Every run folder gets report.html and metrics.json; a comma list in a numeric option, or
--seeds, runs the grid of dry runs and prints one comparison table."""

from __future__ import annotations

import argparse
import json
import os

from toolkit.errors import BadInput

EXAMPLES = """examples:
  kvtk replay --trace agentic-small --baseline simplecpu
  kvtk replay --model qwen3-next-80b-a3b --tp 4 --cpu-gib 64 --phases cold,hot
  kvtk replay --model qwen3-next-80b-a3b --tp 4 --trace mooncake:PATH --max-requests 1000 --phases cold
      --cpu-gib 64,128,256,512 --seeds 1,2 --baseline simplecpu     (a grid: one table, one report)
  kvtk compare runs/<one run> runs/<another run>
  kvtk replay --scenario list"""


def register(subparsers) -> None:
    from toolkit.cli.config_options import add_config_options

    parser = subparsers.add_parser(
        "replay",
        help="run the cold/hot/pressure/replay experiment on a trace",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)  # one option per field of the experiment config, its help and default stated there
    parser.add_argument(
        "--scenario",
        default=None,
        metavar="NAME",
        help="a named setup ('list' lists them); the options given with it override its settings",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON summary")
    add_sweep_options(parser)
    parser.set_defaults(func=run)
    parser.set_defaults(replay_defaults=vars(parser.parse_args([])))


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    from toolkit.experiments.metrics import DEFAULT_SLO_TPOT_MS, DEFAULT_SLO_TTFT_MS

    group = parser.add_argument_group("grids, seeds and the service-level objective")
    group.add_argument(
        "--seeds",
        default=None,
        metavar="SEED[,...]",
        help="run once per seed (the pressure traffic's, and a generated trace's draw); tables show the mean and "
        "a 95%% interval",
    )
    group.add_argument(
        "--slo-ttft-ms",
        type=float,
        default=DEFAULT_SLO_TTFT_MS,
        help=f"goodput counts requests with TTFT at most this (default {DEFAULT_SLO_TTFT_MS:g})",
    )
    group.add_argument(
        "--slo-tpot-ms",
        type=float,
        default=DEFAULT_SLO_TPOT_MS,
        help=f"... and TPOT at most this, where the engine records output tokens (default {DEFAULT_SLO_TPOT_MS:g})",
    )
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="run a grid's runs on this Ray cluster (auto, host:port, ray://host:port; default RAY_ADDRESS if "
        "set, else one after another in this process)",
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
    from toolkit.cli.replay_sweep import parse_grid, run_grid
    from toolkit.experiments.metrics import Slo

    slo = Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)
    params, grid = parse_grid(replay_params(args), args.seeds)
    if not grid.empty:
        if args.scenario:
            raise BadInput(f"--scenario {args.scenario}: a list of values or --seeds needs plain options")
        if args.json:
            raise BadInput("--json: a grid prints its comparison table; its files are in the sweep folder")
        return run_grid(args, params, grid)
    args = argparse.Namespace(**{**vars(args), **params})
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
    from toolkit.experiments.metrics import turns_of_trace, write_metrics
    from toolkit.experiments.report import write_report

    write_metrics(result.run_dir, slo, turns_of_trace(config.workload.trace, config.workload.max_requests))
    report = write_report(result.run_dir)
    if args.json:
        print(json.dumps(result.summary, indent=2, default=str))
    else:
        from toolkit.experiments.compare import load_rows, with_deltas
        from toolkit.experiments.compare_table import format_table

        print(format_summary(result.summary))
        print(format_table(with_deltas(load_rows([result.run_dir])), swept=[]))
        if args.scenario:
            from toolkit.experiments.scenarios import format_side_by_side

            print(format_side_by_side(result.summary))
        print(f"run folder: {result.run_dir}")
        print(f"report: {report}")
        print(f"vLLM's log (INFO and above; its warnings are shown above): {result.summary['vllm_log']}")
    return 0
