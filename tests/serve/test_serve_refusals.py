"""`kvtk serve` refuses a model name it cannot serve in one line, exit 2, before vLLM is imported (a typo used to
reach vLLM's Hub lookup: a 106-line traceback after 48 s)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from toolkit.serve.command import resolve_model

PROBE = (
    "import sys; from toolkit.cli.main import main; rc = main(['serve', '--model', sys.argv[1]]); "
    "print('vllm imported' if 'vllm' in sys.modules else 'vllm not imported'); sys.exit(rc)"
)


def test_a_typo_is_refused_fast_in_one_line():
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PROBE, "tiny-qwen3-nxt"], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--model: 'tiny-qwen3-nxt'" in lines[0] and "did you mean 'tiny-qwen3-next'?" in lines[0]
    assert done.stdout.strip() == "vllm not imported"
    assert took < 5.0, f"refused after {took:.1f} s"


@pytest.mark.parametrize("name", ["./no-such-folder", "no_such_model", "a/b/c"])
def test_no_folder_no_hub_id_refused(name):
    with pytest.raises(ValueError, match=r"no tiny model.*no model folder and no Hugging Face id"):
        resolve_model(name)


def test_folders_and_hub_ids_pass_through(tmp_path):
    assert resolve_model(str(tmp_path)) == (str(tmp_path), False)
    assert resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct") == ("Qwen/Qwen3-Next-80B-A3B-Instruct", False)
