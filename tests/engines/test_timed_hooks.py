"""The connector's timed subclass: hooks timed and admissions reported through `hook_watch`, the base untouched."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolkit.core.observer import CallTimer
from toolkit.engines.harness.timed import TIMED_MODULE, timed_subclass, timed_transfer_config, watch_connector


class Base:
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return (7, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        return None

    def build_connector_meta(self, output):
        raise RuntimeError("boom")

    def not_a_hook(self):
        return "plain"


def test_timed_subclass_times_hooks_and_reports_admissions():
    timed = timed_subclass(Base)
    assert issubclass(timed, Base) and timed.__name__ == "TimedBase" and timed.__module__ == TIMED_MODULE
    connector, timer, matched, admitted = timed(), CallTimer(), [], []
    request = SimpleNamespace(request_id="r1")
    assert connector.get_num_new_matched_tokens(request, 16) == (7, False)  # no watch yet: nothing counted
    watch_connector(
        connector, timer=timer, on_matched=lambda *a: matched.append(a), on_admitted=lambda *a: admitted.append(a)
    )
    assert connector.get_num_new_matched_tokens(request, 32) == (7, False)
    connector.update_state_after_alloc(request, None, 48)
    with pytest.raises(RuntimeError, match="boom"):
        connector.build_connector_meta(None)
    assert connector.not_a_hook() == "plain"
    assert timer.calls == 3 and timer.seconds > 0  # the hook that raised is timed too
    assert matched == [("r1", 32)] and admitted == [("r1", 48)]
    assert Base().get_num_new_matched_tokens(request, 1) == (7, False)  # the base class is untouched
    assert not hasattr(Base, "hook_watch")


def test_admissions_without_a_timer_and_refusing_an_untimed_connector():
    connector, admitted = timed_subclass(Base)(), []
    watch_connector(connector, on_admitted=lambda *a: admitted.append(a))
    connector.update_state_after_alloc(SimpleNamespace(request_id="r2"), None, 5)
    assert admitted == [("r2", 5)]
    with pytest.raises(TypeError, match="not a timed connector"):
        watch_connector(Base(), on_admitted=print)


def test_timed_transfer_config_points_vllm_at_the_timed_class():
    from toolkit.engines.harness import timed_connectors
    from toolkit.vllm.transfer_config import kv_transfer_config

    assert timed_transfer_config(None) is None
    for name in ("toolkit", "simplecpu"):
        plain = kv_transfer_config(name, {"cpu_bytes_to_use": 1 << 20})
        timed = timed_transfer_config(plain)
        assert timed is not None and timed["kv_connector_module_path"] == TIMED_MODULE
        cls = getattr(timed_connectors, timed["kv_connector"])
        assert cls.__mro__[1].__name__ == plain["kv_connector"]
        assert timed["kv_connector_extra_config"] == plain["kv_connector_extra_config"]
