"""The connector's option table has one source, toolkit/vllm/config.py: docs/connector.md holds exactly what
`kvtk docs config` generates from it, no other file carries a copy, and generating it imports neither vLLM nor torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.docs import config_table
from toolkit.docs.config_table import BEGIN_MARKER, END_MARKER, render_table, splice

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "connector.md"


def test_the_committed_table_is_the_generated_one():
    assert config_table.update(DOC, check=True), "docs/connector.md differs: run `kvtk docs config`"


def test_kvtk_docs_config_check_passes_and_catches_a_stale_table(tmp_path, capsys):
    assert main(["docs", "config", "--check"]) == 0
    stale = tmp_path / "connector.md"
    stale.write_text(DOC.read_text().replace('`"slru"` | CPU tier', '`"lru"` | CPU tier'))
    assert main(["docs", "config", "--check", "--doc", str(stale)]) == 1
    assert main(["docs", "config", "--doc", str(stale)]) == 0  # regenerates it
    assert stale.read_text() == DOC.read_text()
    capsys.readouterr()


def test_a_page_without_the_markers_is_bad_input(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# no markers\n")
    assert main(["docs", "config", "--doc", str(page)]) == 2
    assert "markers" in capsys.readouterr().err
    with pytest.raises(ValueError):
        splice(f"{BEGIN_MARKER}\n{BEGIN_MARKER}\n{END_MARKER}\n", "x\n")


def test_every_valid_key_has_one_row_and_its_choices():
    config = config_table.load_config_module()
    rows = config_table.option_rows(config)
    assert [key.strip("`") for key, *_ in rows] == list(config.VALID_KEYS)
    by_key = {key.strip("`"): row for key, *row in rows}
    for key, choices in (
        ("store_policy", config.STORE_POLICIES),
        ("eviction_policy", config.EVICTION_POLICIES),
        ("copy_backend", config.COPY_BACKENDS),
        ("fine_store_priority", config.FINE_STORE_PRIORITIES),
    ):
        for choice in choices:
            assert f'"{choice}"' in by_key[key][0], (key, choice)


def test_the_documented_defaults_are_what_parse_config_returns():
    from toolkit.vllm.config import DEFAULT_CPU_BYTES, parse_config

    parsed = parse_config({}, world_size=1)
    by_key = {key.strip("`"): default for key, _, default, _ in config_table.option_rows()}
    assert by_key["cpu_bytes_to_use"] == config_table.format_default(parsed.cpu_bytes_per_rank)
    assert parsed.cpu_bytes_per_rank == DEFAULT_CPU_BYTES
    for key in ("store_policy", "fine_grained", "eviction_policy", "fine_store_priority", "copy_backend"):
        assert by_key[key] == config_table.format_default(getattr(parsed, key)), key
    assert by_key["fault_injection"] == config_table.format_default(parsed.fault_injection)
    assert by_key["stats_interval_s"] == config_table.format_default(parsed.stats_interval_s)


def _doc_files() -> list[Path]:
    files = [REPO / "README.md"]
    for folder in ("docs", "toolkit", "notebooks", "data", "kernels"):
        files += [p for p in (REPO / folder).rglob("*") if p.suffix in (".md", ".py") and "__pycache__" not in p.parts]
    return files


def test_no_other_file_carries_a_copy_of_the_table():
    keys = config_table.load_config_module().VALID_KEYS
    row = re.compile(r"^\s*\|\s*`(" + "|".join(re.escape(k) for k in keys) + r")`\s*\|")
    copies = []
    for path in _doc_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if path == DOC:
            head, rest = text.split(BEGIN_MARKER)
            _, tail = rest.split(END_MARKER)
            text = head + tail
        copies += [f"{path.relative_to(REPO)}:{n}" for n, line in enumerate(text.splitlines(), 1) if row.match(line)]
    assert not copies, f"copies of the connector config table (generate it instead): {copies}"


def test_generating_the_table_imports_neither_vllm_nor_torch():
    code = (
        "import sys\n"
        "from toolkit.docs.config_table import render_table\n"
        "assert render_table().startswith('| key |')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch'))\n"
        "print(heavy)\n"
        "raise SystemExit(1 if heavy else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_table_has_a_row_per_key():
    assert render_table().count("\n") == 2 + len(config_table.load_config_module().VALID_KEYS)
