"""One CLI vocabulary: every `kvtk` sub-command's --help has an examples block, and an old option spelling still works
while naming its new one on stderr (toolkit/cli/aliases.py). In-process: no vLLM import, a second in all."""

from __future__ import annotations

import argparse
import json
import re
import shlex

import pytest

from toolkit.cli.main import build_parser, main


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_is_covered():
    # the README's table names these; a new sub-command lands in the parametrized test below by itself
    assert {"geometry", "replay", "serve", "soak", "doctor"} <= set(subcommands())


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_help_has_examples(capsys, name):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().lower() == "examples:"), None)
    assert start is not None, f"kvtk {name} --help has no examples block:\n{out}"
    examples = [line.strip() for line in lines[start + 1 :] if line.strip().startswith("kvtk ")]
    assert examples, f"kvtk {name} --help: examples block without a kvtk command"
    assert any(line.startswith(f"kvtk {name}") for line in examples), examples


def nested_commands() -> list[tuple[str, str]]:
    """(command, action) of every sub-command that has its own actions (`kvtk models ensure`, `kvtk docs results`)."""
    out = []
    for name, sub in subcommands().items():
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction) and name != "bench":  # bench targets: below
                out += [(name, choice) for choice in action.choices]
    return out


def examples_of(out: str) -> list[str]:
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().lower() == "examples:"), None)
    assert start is not None, f"no examples block:\n{out}"
    return [line.strip() for line in lines[start + 1 :] if "kvtk " in line]


def test_nested_commands_are_found():
    assert {("models", "ensure"), ("models", "list"), ("docs", "results"), ("docs", "figures")} <= set(
        nested_commands()
    )


@pytest.mark.parametrize(("name", "action"), nested_commands())
def test_every_nested_help_has_examples_of_itself(capsys, name, action):
    with pytest.raises(SystemExit) as exc:
        main([name, action, "--help"])
    assert exc.value.code == 0
    examples = examples_of(capsys.readouterr().out)
    assert any(line.startswith(f"kvtk {name} {action}") for line in examples), examples


def bench_targets() -> list[str]:
    from toolkit.cli.bench import BENCH_MODULES

    return sorted(BENCH_MODULES)


@pytest.mark.parametrize("target", bench_targets())
def test_every_bench_target_help_has_examples_whose_options_it_takes(capsys, target):
    """The target's own parser (the module's) prints the block, and each example parses with that parser."""
    import importlib

    from toolkit.cli.bench import BENCH_MODULES

    with pytest.raises(SystemExit) as exc:
        main(["bench", target, "--help"])
    assert exc.value.code == 0
    examples = examples_of(capsys.readouterr().out)
    assert examples and all(f"kvtk bench {target}" in line for line in examples), examples
    parser = argparse.ArgumentParser(prog=f"kvtk bench {target}", exit_on_error=False)
    importlib.import_module(BENCH_MODULES[target][0]).add_arguments(parser)
    for line in examples:
        words = shlex.split(line.split(f"kvtk bench {target}", 1)[1])  # a shell line: '' is an empty word
        parser.parse_args(words)  # an example with an option the target lacks raises here


OLD_AND_NEW = [
    # (old argv, new argv, the old spelling, the new one)
    (
        ["geometry", "--preset", "gpt-oss-20b", "--json"],
        ["geometry", "--model", "gpt-oss-20b", "--json"],
        "--preset",
        "--model",
    ),
    (
        ["geometry", "--model", "gpt-oss-20b", "--hash-block=16", "--json"],
        ["geometry", "--model", "gpt-oss-20b", "--prefix-match-unit", "16", "--json"],
        "--hash-block",
        "--prefix-match-unit",
    ),
]


@pytest.mark.parametrize(("old_argv", "new_argv", "old", "new"), OLD_AND_NEW)
def test_an_old_spelling_works_and_names_the_new_one(capsys, old_argv, new_argv, old, new):
    assert main(old_argv) == 0
    old_run = capsys.readouterr()
    assert old_run.err.strip() == f"kvtk geometry: {old} is now {new}"
    assert main(new_argv) == 0
    new_run = capsys.readouterr()
    assert new_run.err == ""
    assert json.loads(old_run.out) == json.loads(new_run.out)


def test_cpu_bytes_becomes_the_same_cpu_gib(capsys):
    """kvtk serve's --cpu-bytes is now --cpu-gib: the connector gets the very same byte count."""
    assert main(["serve", "--cpu-bytes", "1048576", "--print-command"]) == 0
    old_run = capsys.readouterr()
    assert old_run.err.strip() == "kvtk serve: --cpu-bytes is now --cpu-gib"
    assert main(["serve", "--cpu-gib", "0.0009765625", "--print-command"]) == 0
    new_run = capsys.readouterr()
    assert '"cpu_bytes_to_use":1048576' in old_run.out and old_run.out == new_run.out


def test_an_option_a_command_has_itself_is_not_rewritten(capsys):
    """soak keeps --cpu-blocks; a word after `--` is never touched."""
    from toolkit.cli.aliases import rewrite_command_line

    parser = build_parser()
    assert rewrite_command_line(parser, ["soak", "--cpu-blocks", "8"]) == ["soak", "--cpu-blocks", "8"]
    assert rewrite_command_line(parser, ["geometry", "--", "--preset"]) == ["geometry", "--", "--preset"]
    assert capsys.readouterr().err == ""


def test_bench_serve_cpu_bytes_becomes_the_same_cpu_gib(capsys):
    """`kvtk bench serve` has --cpu-gib like kvtk serve; its old --cpu-bytes is rewritten by its own parser's table."""
    from toolkit.bench import serve
    from toolkit.cli.aliases import rewrite_old_options

    parser = argparse.ArgumentParser(prog="kvtk bench serve", exit_on_error=False)
    serve.add_arguments(parser)
    args = parser.parse_args(rewrite_old_options(parser, ["--cpu-bytes", "1048576"], parser.prog))
    assert int(args.cpu_gib * 2**30) == 1048576
    assert capsys.readouterr().err.strip() == "kvtk bench serve: --cpu-bytes is now --cpu-gib"


# What a user's help must not show: the tracker's issue or PR numbers, the toolkit's module paths or private names.
NUMBERED = re.compile(r"\bissues? \d+|\bPR \d+")
INTERNAL = re.compile(r"\b[\w/]+\.py\b|\btoolkit[./]\w+|\b_[a-z]\w*\(")


def help_text(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [[name] for name in sorted(subcommands())]
    + [[name, action] for name, action in nested_commands()]
    + [["bench", target] for target in bench_targets()],
    ids=" ".join,
)
def test_no_help_names_an_issue_or_pr_number(capsys, argv):
    assert not NUMBERED.findall(help_text(capsys, argv)), argv


@pytest.mark.parametrize("target", bench_targets())
def test_no_bench_help_names_a_module_or_private_function(capsys, target):
    assert not INTERNAL.findall(help_text(capsys, ["bench", target]))
