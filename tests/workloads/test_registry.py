"""The one registry of workload generators: every generator named once, trace specs resolved through it,
each a pure function of its parameters (seed included), each size rule matching what it generates."""

import inspect

import pytest

from toolkit.workloads import registry
from toolkit.workloads.resolve import resolve_trace

SMALL = {
    "fewshot": "num_requests=4,prefix_tokens=300,question_tokens=20",
    "agentic": "num_sessions=2,num_turns=3,system_tokens=200,user_tokens=40,assistant_tokens=30",
    "longdoc": "num_docs=2,doc_tokens=300,num_questions=4,question_tokens=20",
}


def test_every_generator_lives_in_workloads_and_is_named_once():
    assert len(registry.GENERATORS) >= 5
    for name, gen in registry.GENERATORS.items():
        assert gen.name == name and gen.description and gen.makes
        assert inspect.getmodule(gen.make).__name__.startswith("toolkit.workloads."), name
    assert set(registry.TRACE_SPECS) == {"fewshot", "agentic", "longdoc"}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_trace_spec_is_a_pure_function_of_its_seed_and_its_size_rule_holds(name):
    params = inspect.signature(registry.TRACE_SPECS[name].make).parameters
    for key in SMALL[name].split(","):
        assert key.split("=")[0] in params, f"{name}: no parameter {key}"
    spec = f"{name}:{SMALL[name]}"
    a, b = resolve_trace(spec + ",seed=1"), resolve_trace(spec + ",seed=1")
    other = resolve_trace(spec + ",seed=2")
    prompts = [a.prompt_token_ids(r) for r in a.requests]
    assert prompts == [b.prompt_token_ids(r) for r in b.requests]
    assert prompts != [other.prompt_token_ids(r) for r in other.requests]
    kwargs = {k: int(v) for k, v in (kv.split("=") for kv in SMALL[name].split(","))}
    num_requests, longest, _ = registry.TRACE_SPECS[name].sizes(kwargs)
    assert num_requests == len(a.requests)
    assert longest >= max(len(p) for p in prompts)
