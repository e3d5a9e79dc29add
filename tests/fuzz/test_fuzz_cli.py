"""Property: `kvtk` given bad options exits 2 with one line on stderr, no traceback, and creates nothing: not the
--out folder, not a default run folder in the working directory. (In-process: one import, many cases.)"""

from __future__ import annotations

from fuzz_helpers import FUZZ, assert_one_line, listing
from hypothesis import given
from hypothesis import strategies as st

NUMBERS = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e300", "-0.0", "1e-30", "abc", ""])
# One option that must be refused, whatever else is given; replay never starts an engine on these.
BAD_REPLAY = st.sampled_from(
    [
        ("--cpu-gib", "nan"),
        ("--cpu-gib", "inf"),
        ("--cpu-gib", "-1"),
        ("--cpu-gib", "1e-30"),
        ("--tp", "0"),
        ("--dcp", "-3"),
        ("--max-requests", "0"),
        ("--time-scale", "nan"),
        ("--time-scale", "inf"),
        ("--device-gib", "nan"),
        ("--device-blocks", "0"),
        ("--window", "0"),
        ("--copy-gbps", "inf"),
        ("--compute-efficiency", "nan"),
        ("--gpu", "../../etc/passwd"),
        ("--gpu", "nosuch"),
        ("--trace", "fewshot:num_requests=0"),
        ("--trace", "fewshot:num_requests=nan"),
        ("--trace", "longdoc:num_docs=0"),
        ("--trace", "fewshot:max_tokens=-1"),
        ("--trace", "fewshot:max_tokens=1000000000000"),
        ("--trace", "fewshot:num_requests=1000000,question_tokens=1000"),
        ("--trace", "agentic:name=../../up"),
        ("--trace", "no/such.jsonl"),
        ("--trace", "mooncake:/no/such"),
        ("--trace", "fewshot:bogus=1"),
        ("--prefix-match-unit", "-5"),
        ("--out", "runs/../../escape"),
    ]
)
EXTRA_REPLAY = st.lists(
    st.tuples(st.sampled_from(["--cpu-gib", "--time-scale", "--device-gib", "--copy-gbps"]), NUMBERS), max_size=2
)


@FUZZ
@given(bad=BAD_REPLAY, extra=EXTRA_REPLAY, use_out=st.booleans())
def test_replay_bad_options_exit_2_on_one_line_and_create_nothing(warm_imports, workdir, cli, bad, extra, use_out):
    before = listing(workdir)
    argv = ["replay", "--engine", "dry", "--phases", "cold", "--connector", "simplecpu"]
    for flag, value in extra:
        argv += [f"{flag}={value}"]
    argv += [f"{bad[0]}={bad[1]}"]  # last: it wins over a good value of the same flag
    if use_out and bad[0] != "--out":
        argv += ["--out", str(workdir / "out")]
    rc, err = cli(*argv)
    assert rc == 2, err
    assert "Traceback" not in err
    assert_one_line(err.strip().splitlines()[-1])
    if not err.startswith("usage:"):  # argparse's own refusals add their usage line
        assert_one_line(err)
    assert listing(workdir) == before  # no --out, no runs/, nothing else


GEOMETRY_OPTIONS = st.sampled_from(
    [
        "--tp",
        "--dcp",
        "--pcp",
        "--world-size",
        "--cpu-gib",
        "--prefix-match-unit",
        "--local-tokens",
        "--external-tokens",
    ]
)


@FUZZ
@given(
    options=st.lists(st.tuples(GEOMETRY_OPTIONS, NUMBERS), min_size=1, max_size=3),
    preset=st.sampled_from([None, "qwen3-next-80b", "../../etc/hosts", "nosuch"]),
)
def test_geometry_options_are_answered_or_refused_on_one_line(workdir, cli, options, preset):
    argv = ["geometry", "--json"] + (["--model", preset] if preset else [])
    for flag, value in options:
        argv.append(f"{flag}={value}")
    rc, err = cli(*argv)
    assert rc in (0, 2), err
    assert "Traceback" not in err
    if rc == 2:
        assert_one_line(err.strip().splitlines()[-1])
        if not err.startswith("usage:"):
            assert_one_line(err)
    assert listing(workdir) == {"in"}


ADDRESSES = st.one_of(
    st.sampled_from(
        ["x; rm -rf /", "http://evil", "ray://", ":1", "host:port", "a b:1", "ray://h:99999999", "$(id):1"]
    ),
    st.text(alphabet="!$;& |<>'\"`\\()*?", min_size=1, max_size=12),
)


@FUZZ
@given(address=ADDRESSES, num_cpus=st.sampled_from([None, "nan", "inf", "-1", "0"]))
def test_sweep_bad_address_or_sizes_exit_2_before_any_folder(workdir, cli, address, num_cpus):
    spec = workdir / "in" / "s.yaml"
    spec.write_text("axes: {seed: [0, 1]}\n")
    argv = ["sweep", str(spec), "--address", address, "--out", str(workdir / "sw")]
    if num_cpus is not None:
        argv += [f"--num-cpus={num_cpus}"]
    rc, err = cli(*argv)
    assert rc == 2 and "Traceback" not in err
    assert_one_line(err.strip().splitlines()[-1])
    assert listing(workdir) == {"in", "in/s.yaml"}
