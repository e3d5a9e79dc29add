"""vLLM's log goes to the run folder; the console (a notebook's output, the CLI) keeps only its warnings."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from toolkit.engines.vllm_log import VLLM_LOG_NAME, VllmLogCapture, vllm_log_to


def test_info_goes_to_the_file_warnings_to_both_and_the_logger_is_restored(tmp_path, capfd):
    logger = logging.getLogger("vllm")
    before = (list(logger.handlers), logger.level, logger.propagate, os.environ.get("VLLM_CONFIGURE_LOGGING"))
    path = tmp_path / VLLM_LOG_NAME
    with vllm_log_to(path) as log:
        assert os.environ["VLLM_CONFIGURE_LOGGING"] == "0"  # vLLM must not swap its own handlers back in
        logging.getLogger("vllm.config.model").info("Resolved architecture: Tiny")
        logging.getLogger("vllm.platforms").warning("Triton is not installed")
        try:
            raise ValueError("Tokenizer not available")
        except ValueError:
            logging.getLogger("vllm.renderers").warning("Chat template warmup failed", exc_info=True)
    assert log == path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert "INFO [vllm.config.model:" in text and "Resolved architecture: Tiny" in text
    assert "WARNING [vllm.platforms:" in text
    captured = capfd.readouterr()
    assert "Resolved architecture" not in captured.out + captured.err
    assert "vLLM WARNING: Triton is not installed" in captured.err
    # A traceback stays in the file; the console gets the warning's first line.
    assert "Traceback" in text and "Traceback" not in captured.err
    assert "vLLM WARNING: Chat template warmup failed [" in captured.err
    assert "more line(s) in the log file]" in captured.err
    assert (list(logger.handlers), logger.level, logger.propagate, os.environ.get("VLLM_CONFIGURE_LOGGING")) == before


def test_a_capture_restarted_per_engine_appends_and_shows_each_warning_once(tmp_path, capfd):
    capture = VllmLogCapture(tmp_path / VLLM_LOG_NAME)
    for _ in range(2):  # two engines of one run
        capture.start()
        logging.getLogger("vllm.worker").warning("libtcmalloc is not found in LD_PRELOAD")
        logging.getLogger("vllm.worker").info("init engine took 2.50 s")
        capture.stop()
    assert capture.path.read_text().count("init engine took 2.50 s") == 2
    assert capfd.readouterr().err.count("libtcmalloc is not found") == 1
    capture.start()
    with pytest.raises(RuntimeError, match="already started"):
        capture.start()
    capture.stop()


@pytest.mark.engine
def test_replay_writes_vllm_log_to_the_run_folder_and_says_where(tmp_path, capfd):
    """The dry engine builds vLLM's real config and scheduler, which log at INFO (e.g. "Resolved architecture")."""
    from toolkit.cli.main import main

    out = tmp_path / "run"
    assert main(["replay", "--engine", "dry", "--phases", "cold", "--out", str(out)]) == 0
    captured = capfd.readouterr()
    log = out / VLLM_LOG_NAME
    assert f"vLLM's log (INFO and above; its warnings are shown above): {log}" in captured.out
    text = log.read_text()
    assert " INFO [vllm." in text and "Resolved architecture" in text
    console = captured.out + captured.err
    assert "Resolved architecture" not in console and " INFO " not in console
