"""The engine interface (`toolkit.engines.base.Engine`): what every engine must implement, and the defaults that
say "not this engine" for the optional abilities. No vLLM."""

from __future__ import annotations

import pytest

from toolkit.engines.base import Engine, VariantSpec


class Minimal(Engine):
    def describe(self):
        return {"engine": "minimal"}

    def run_phase(self, phase, requests, *, progress=False, concurrency=None, after=None):
        return []

    def reset_device_cache(self):
        return None

    def close(self):
        return None


def test_the_four_required_methods_are_abstract():
    assert Engine.__abstractmethods__ == {"describe", "run_phase", "reset_device_cache", "close"}
    with pytest.raises(TypeError):
        Engine()  # type: ignore[abstract]


def test_defaults_say_not_this_engine():
    engine = Minimal()
    assert engine.warm_up(128) is None
    assert engine.clock is None
    assert engine.virtual_now_s() is None
    assert engine.phase_extra("hot") == {}
    with pytest.raises(NotImplementedError, match="Minimal"):
        engine.switch_to(VariantSpec(name="other"))


def test_the_three_engines_subclass_it():
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine
    from toolkit.engines.server import ServerEngine

    for cls in (DryEngine, LiveEngine, ServerEngine):
        assert issubclass(cls, Engine) and not cls.__abstractmethods__, cls
    assert DryEngine.switch_to is Engine.switch_to  # only the live engine switches in place
    assert LiveEngine.switch_to is not Engine.switch_to
    assert ServerEngine.phase_extra is not Engine.phase_extra
