"""Property: any sweep spec file either expands to cells that all pass the up-front checks with values inside the
caps, or is refused with one line naming the spec (and the line or cell), quickly."""

from __future__ import annotations

import json
import math

import yaml
from fuzz_helpers import FUZZ, assert_one_line
from hypothesis import given
from hypothesis import strategies as st

from toolkit import limits
from toolkit.experiments.config_checks import check_fields
from toolkit.sweep.params import build_config
from toolkit.sweep.spec import load_spec, validate_cells

BAD_VALUES = st.sampled_from([0, -1, -2.5, math.nan, math.inf, 10**12, "", "../x", "nope", None, True, [], {}])
GOOD = {
    "cpu_gib": [0.5],
    "max_requests": [4],
    "trace": ["fewshot-small"],
    "eviction": ["slru"],
    "seed": [0],
    "gpu": ["h200"],
    "tp": [1],
    "time_scale": [1.0],
    "device_blocks": [256],
    "window": [2],
}
TRACES = st.sampled_from(
    [
        "fewshot:num_requests=0",
        "fewshot:num_requests=nan",
        "longdoc:num_docs=0",
        "fewshot:max_tokens=-1",
        "fewshot:prefix_tokens=100000000",
        "agentic:name=../up",
        "nosuch-trace",
        "missing/file.jsonl",
        "mooncake:/no/such.jsonl",
        "fewshot:num_requests=2",
    ]
)


@st.composite
def spec_documents(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(sorted(GOOD)), min_size=1, max_size=3, unique=True))
    axes = {}
    for key in keys:
        values = list(GOOD[key])
        if draw(st.booleans()):
            values.append(draw(TRACES) if key == "trace" else draw(BAD_VALUES))
        axes[key] = values
    doc: dict = {"axes": axes, "fixed": {"phases": ["cold"]}}
    if draw(st.booleans()):
        doc["cells"] = [{"seed": draw(st.sampled_from([1, -1, math.nan, "x"]))}]
    if draw(st.integers(0, 3)) == 0:
        doc["name"] = draw(st.sampled_from(["ok-name", "../escape", "a/b", ".", "x" * 200]))
    if draw(st.integers(0, 3)) == 0:
        del doc["axes"]  # cells only (or nothing at all)
    return doc


RAW_SPECS = st.sampled_from(
    [
        "a: &a [1, 1, 1]\nb: &b [*a, *a, *a]\naxes: {seed: [*b]}\n",  # an alias (bomb) in miniature
        "axes: {seed: [1]}\naxes: {seed: [2]}\n",  # duplicate key
        "axes:\n  seed: [1]\n  seed: [2]\n",
        "axes: " + "[" * 200 + "]" * 200 + "\n",  # deep nesting
        "axes: {seed: [1]}\n\xff\xfe\n",
        '{"axes": {"seed": [1]}, "axes": {}}',
        "axes: !!python/object/apply:os.system ['true']\n",
        "- just\n- a list\n",
        "axes: {seed: [.nan]}\n",
        "axes: {cpu_gib: [.inf, 1]}\n",
    ]
)


@FUZZ
@given(doc=spec_documents(), as_yaml=st.booleans(), raw=st.one_of(st.none(), RAW_SPECS))
def test_spec_files_expand_within_caps_or_are_refused_on_one_line(warm_imports, tmp_path_factory, doc, as_yaml, raw):
    folder = tmp_path_factory.mktemp("s")
    path = folder / ("spec.yaml" if as_yaml or raw is not None else "spec.json")
    if raw is not None:
        path.write_bytes(raw.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe"))
    else:
        path.write_text(yaml.safe_dump(doc) if as_yaml else json.dumps(doc))
    try:
        spec = load_spec(path)
        cells = spec.cells()
        validate_cells(cells)
    except (ValueError, FileNotFoundError) as exc:
        assert_one_line(str(exc))
        assert str(path) in str(exc) or "cell " in str(exc) or ":" in str(exc)
        return
    limits.check_name(spec.name, "name")
    assert cells
    for cell in cells:
        config = build_config(cell.params)
        check_fields(config)  # nothing the caps refuse got through
    assert sorted(p.name for p in folder.iterdir()) == [path.name]  # reading a spec creates nothing
