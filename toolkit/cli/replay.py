"""`kvtk replay`: cold / hot / pressure / replay on a trace, for the toolkit and its baselines (dry or live)."""

from __future__ import annotations

import argparse
import json
import os

EXAMPLES = """examples:
  kvtk replay --trace agentic-small --baseline simplecpu
  kvtk replay --model qwen3-next-80b-a3b --tp 4 --cpu-gib 64 --phases cold,hot
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
    parser.set_defaults(func=run)
    parser.set_defaults(replay_defaults=vars(parser.parse_args([])))


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
