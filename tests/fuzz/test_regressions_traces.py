"""Issue 21, items 1-3, 6 and 8 (parsing): each reported bad input, refused at the edge with one line, quickly."""

from __future__ import annotations

import json
import os
import time

import pytest
from fuzz_helpers import assert_one_line, mode_of

from toolkit import limits
from toolkit.workloads.mooncake import load_mooncake
from toolkit.workloads.resolve import generate, resolve_trace
from toolkit.workloads.trace_parser import load_trace
from toolkit.workloads.traces import TraceError

HEADER = {"type": "header", "schema": "kvtk.trace/1", "name": "t", "workload": "w", "vocab_size": 64}


def _trace(path, *objs, header=None):
    lines = [json.dumps({**HEADER, **(header or {})})] + [o if isinstance(o, str) else json.dumps(o) for o in objs]
    path.write_text("\n".join(lines) + "\n")
    return path


def _request(**fields):
    return {
        "type": "request",
        "request_id": "r",
        "arrival_s": 0.0,
        "prompt": [{"token_ids": [5, 6]}],
        "max_tokens": 1,
        **fields,
    }


def _refused(path, *needles, loader=load_trace, max_s: float = 2.0) -> str:
    started = time.perf_counter()
    with pytest.raises(TraceError) as info:
        loader(path)
    assert time.perf_counter() - started < max_s
    message = str(info.value)
    assert_one_line(message)
    assert str(path) in message
    for needle in needles:
        assert needle in message, message
    return message


# ----- 1. a trace's name becomes a path ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../outside", "a/b", "..", ".hidden", "a\\b", "x" * 200])
def test_1_a_header_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    _refused(_trace(tmp_path / "t.jsonl", _request(), header={"name": name}), "line 1", "'name'")


def test_1_a_generator_name_with_dotdot_is_refused():
    with pytest.raises(ValueError, match="name: must be a plain name"):
        generate("fewshot:name=../../outside")


def test_1_make_private_dir_chmods_only_folders_it_creates(tmp_path):
    from toolkit.private_fs import make_private_dir

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    os.chmod(tmp_path, 0o755)
    make_private_dir(shared / "new" / ".." / ".." / "made")  # passes through shared and tmp_path on the way
    assert mode_of(shared) == 0o755 and mode_of(tmp_path) == 0o755
    assert mode_of(shared / "new") == 0o700 and mode_of(tmp_path / "made") == 0o700


def test_1_a_run_folder_with_dotdot_is_refused_and_nothing_is_made(tmp_path):
    from toolkit.private_fs import create_run_dir

    with pytest.raises(ValueError, match="'..' component"):
        create_run_dir(tmp_path / "runs" / ".." / ".." / "escape")
    assert list(tmp_path.iterdir()) == []
    assert limits.path_component("../../etc/passwd") == "etc_passwd"


# ----- 2. unbounded memory from one line ------------------------------------------------------------------------


def test_2_a_mooncake_line_with_a_million_hash_ids_is_refused_before_any_prompt_is_built(tmp_path):
    path = tmp_path / "mc.jsonl"
    ids = list(range(10**6))
    path.write_text(
        json.dumps({"timestamp": 0, "input_length": 512 * len(ids), "output_length": 1, "hash_ids": ids}) + "\n"
    )
    _refused(path, "line 1", "'input_length'", str(limits.MAX_PROMPT_TOKENS), loader=load_mooncake)


def test_2_a_random_segment_of_2e9_tokens_is_refused_before_it_is_drawn(tmp_path):
    seg = {"type": "segment", "segment_id": "s", "random": {"seed": 0, "num_tokens": 2 * 10**9}}
    _refused(_trace(tmp_path / "t.jsonl", seg), "line 2", "'num_tokens'", max_s=0.5)


def test_2_outputs_of_10e12_tokens_are_refused(tmp_path):
    _refused(_trace(tmp_path / "t.jsonl", _request(max_tokens=10**12)), "line 2", "'max_tokens'")
    path = tmp_path / "mc.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 10**12, "hash_ids": [1]}) + "\n")
    _refused(path, "line 1", "'output_length'", loader=load_mooncake)


def test_2_a_prompt_longer_than_the_cap_is_refused_so_max_model_len_stays_bounded(tmp_path):
    half = limits.MAX_PROMPT_TOKENS // 2 + 1
    segs = [{"type": "segment", "segment_id": s, "random": {"seed": 1, "num_tokens": half}} for s in "ab"]
    _refused(
        _trace(tmp_path / "t.jsonl", *segs, _request(prompt=[{"segment": "a"}, {"segment": "b"}])),
        "line 4",
        "'prompt'",
        max_s=10,
    )
    assert limits.MAX_MODEL_LEN == limits.MAX_PROMPT_TOKENS + limits.MAX_OUTPUT_TOKENS


def test_2_generators_refuse_huge_sizes_before_drawing_anything():
    started = time.perf_counter()
    for spec in (
        "fewshot:prefix_tokens=2000000000",
        "fewshot:num_requests=1000000,question_tokens=1000",
        "agentic:num_sessions=100000,num_turns=1000",
    ):
        with pytest.raises(ValueError, match="limit|in \\["):
            generate(spec)
    assert time.perf_counter() - started < 0.5


# ----- 3. NaN and infinite arrival times ------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_3_non_finite_arrivals_are_refused(tmp_path, literal):
    line = json.dumps(_request()).replace('"arrival_s": 0.0', f'"arrival_s": {literal}')
    _refused(_trace(tmp_path / "t.jsonl", line), "line 2")


def test_3_non_finite_mooncake_timestamps_and_time_scales_are_refused(tmp_path):
    path = tmp_path / "mc.jsonl"
    path.write_text('{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n')
    _refused(path, "line 1", loader=load_mooncake)
    path.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n')
    for scale in (float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match="time_scale"):
            resolve_trace(f"mooncake:{path}", time_scale=scale)


# ----- 6. generator specs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "fewshot:num_requests=0",
        "fewshot:num_requests=nan",
        "fewshot:max_tokens=-1",
        "longdoc:num_docs=0",
        "agentic:num_turns=0",
        "fewshot:interarrival_s=inf",
        "fewshot:num_requests=1.5",
        "fewshot:seed=-1",
        "fewshot:num_requests=2,num_requests=3",
    ],
)
def test_6_bad_generator_parameters_are_refused_by_name(spec):
    with pytest.raises(ValueError) as info:
        resolve_trace(spec)
    assert_one_line(str(info.value))
    assert spec.split(":")[1].split("=")[0] in str(info.value)


def test_6_a_trace_with_no_requests_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no requests"):
        resolve_trace(str(_trace(tmp_path / "t.jsonl")))


# ----- 8. parsing: duplicates, nesting, encoding ----------------------------------------------------------------


def test_8_duplicate_keys_in_a_trace_line_are_refused(tmp_path):
    line = json.dumps(_request())[:-1] + ', "max_tokens": 3}'
    _refused(_trace(tmp_path / "t.jsonl", line), "line 2", "duplicate key 'max_tokens'")


def test_8_deep_nesting_is_one_line_not_a_recursion_traceback(tmp_path):
    _refused(_trace(tmp_path / "t.jsonl", "[" * 100_000 + "]" * 100_000), "line 2", "nested too deeply")


def test_8_non_utf8_names_the_file_and_line(tmp_path):
    path = _trace(tmp_path / "t.jsonl", _request())
    path.write_bytes(path.read_bytes().replace(b'"r"', b'"\xff"'))
    _refused(path, "line 2", "not UTF-8")
    mc = tmp_path / "mc.jsonl"
    mc.write_bytes(b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n\xfe\n')
    _refused(mc, "line 2", "not UTF-8", loader=load_mooncake)


def test_8_an_overlong_line_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    import toolkit.strict_load as strict

    monkeypatch.setattr(strict, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(strict.iter_lines, "__defaults__", (1000,))
    _refused(_trace(tmp_path / "t.jsonl", _request(prompt=[{"token_ids": [5] * 2000}])), "line 2", "longer than")


def test_2_a_live_run_refuses_prompts_past_its_max_model_len_before_starting():
    from toolkit.experiments.plan_checks import check_inputs
    from toolkit.experiments.runner import ExperimentConfig

    config = ExperimentConfig(engine="live", trace="fewshot:prefix_tokens=9000")
    with pytest.raises(ValueError, match="exceed the live engine's max_model_len 8192"):
        check_inputs(config, resolve_trace(config.workload.trace))
