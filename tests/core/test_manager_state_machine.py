"""Stateful property test: random request streams against the manager and the device-pool model.

Invariants after every step: ref counts balance (every pin accounted for), no device block twice in one store
event, keys become hits only after every worker completed the store, no hit covers the last prompt token, loads
start on a scheduler block with an aligned length, Mamba-align blocks are stored only from hand-offs, and once
everything finished and every copy completed, every CPU block is free and every device pin released.
"""

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from toolkit.core import DeviceBlockPoolModel, HybridGeometry, OffloadConfig, OffloadManager, parse_groups_spec
from toolkit.core.sim import SimEngine

GEOMETRIES = [
    ("full_attention:16,mamba_align:64", 1),
    ("full_attention:16,mamba_align:64", 2),
    ("full_attention:16,mamba_align:64", 4),
    ("full_attention:16,mamba_all:32", 2),
    ("full_attention:16,sliding_window:16/48", 1),
]
NEVER = 10**9


class ManagerMachine(RuleBasedStateMachine):
    @initialize(
        geometry=st.sampled_from(GEOMETRIES),
        world_size=st.sampled_from([1, 2]),
        cpu_blocks=st.sampled_from([6, 24, 96]),
        lazy=st.booleans(),
        policy=st.sampled_from(["lru", "slru"]),
    )
    def setup(self, geometry, world_size, cpu_blocks, lazy, policy):
        groups, dcp = geometry
        self.geo = HybridGeometry(groups=parse_groups_spec(groups), dcp=dcp, hash_block_tokens=16)
        self.device = DeviceBlockPoolModel(400)
        self.mgr = OffloadManager(
            geometry=self.geo,
            device_pool=self.device,
            config=OffloadConfig(
                num_cpu_blocks=cpu_blocks,
                world_size=world_size,
                lazy=lazy,
                eviction_policy=policy,
                max_num_batched_tokens=128,
                handoff_retry_queue_blocks=4,
                handoff_retry_steps=3,
            ),
        )
        self.geo = self.mgr.geometry
        self.eng = SimEngine(self.mgr, self.device, chunk_tokens=64, max_running=4, completion_delay_steps=NEVER)
        self.reported: Counter = Counter()
        self.next_id = 0
        real_lookup = self.mgr.lookup

        def checked_lookup(request, local_tokens):
            result = real_lookup(request, local_tokens)
            if result.hit_tokens:
                assert local_tokens % self.geo.scheduler_block_tokens == 0, local_tokens
                assert result.hit_tokens % self.geo.alignment_tokens == 0, (
                    result.hit_tokens,
                    self.geo.alignment_tokens,
                )
                assert local_tokens + result.hit_tokens <= request.num_tokens - 1, (result, request.num_tokens)
            return result

        self.mgr.lookup = checked_lookup

    # ----- rules ----------------------------------------------------------------------------------------------

    @rule(
        prefix=st.integers(0, 2),
        prefix_tokens=st.sampled_from([0, 64, 128, 160]),
        extra=st.integers(1, 150),
        decode=st.integers(1, 20),
    )
    def arrive(self, prefix, prefix_tokens, extra, decode):
        tokens = [prefix * 100_000 + i for i in range(prefix_tokens)]
        tokens += [self.next_id * 1_000 + 50_000_000 + i for i in range(extra)]
        self.eng.add_request(f"r{self.next_id}", tokens, num_decode_tokens=decode)
        self.next_id += 1

    @rule(num_steps=st.integers(1, 4), settle=st.booleans())
    def schedule_chunk(self, num_steps, settle):
        for _ in range(num_steps):
            meta = self.eng.step()
            if meta.store is not None:
                ids = meta.store.device_block_ids
                assert len(set(ids)) == len(ids), ids
                transfer = self.mgr.stores.transfer(meta.store.event_id)
                # Eager: Mamba align blocks come only from live requests' hand-offs (never a positional scan).
                # Lazy: the free-queue walk may also pick a hashed Mamba block by its own key, which is exactly
                # what the device prefix cache itself trusts; the positional scan still never touches them.
                allowed = {"handoff", "handoff_fine", "lazy"} if self.mgr.config.lazy else {"handoff", "handoff_fine"}
                for group_id, source in zip(transfer.group_ids, transfer.sources):
                    if self.geo.groups[group_id].kind.value == "mamba_align":
                        assert source in allowed, source
            if settle:  # every worker reports every copy of this step
                self._settle()

    def _settle(self):
        for _, meta in self.eng.in_flight:
            if meta.store is not None and self.mgr.stores.is_pending(meta.store.event_id):
                left = self.mgr.config.world_size - self.reported[meta.store.event_id]
                self.mgr.complete_stores({meta.store.event_id: left})
                self.reported[meta.store.event_id] += left
            if meta.load is not None:
                request_ids = list(self.mgr.loads.event_request_ids(meta.load.event_id))
                self.mgr.complete_loads(request_ids)
                for request_id in request_ids:
                    req = self.eng.running.get(request_id)
                    if req is not None and req.waiting_for_load:
                        req.waiting_for_load = False
                        req.view.num_computed_tokens = req.external_tokens
        self.eng.in_flight.clear()

    @rule(data=st.data())
    def complete_store(self, data):
        pending = [
            m for _, m in self.eng.in_flight if m.store is not None and self.mgr.stores.is_pending(m.store.event_id)
        ]
        if pending:
            meta = data.draw(st.sampled_from(pending))
            self.mgr.complete_stores({meta.store.event_id: 1})  # one worker at a time
            self.reported[meta.store.event_id] += 1

    @rule(data=st.data(), fail=st.booleans())
    def complete_load(self, data, fail):
        loads = [m for _, m in self.eng.in_flight if m.load is not None and m.load.event_id in m.load_event_to_req_ids]
        if not loads:
            return
        meta = data.draw(st.sampled_from(loads))
        request_ids = list(self.mgr.loads.event_request_ids(meta.load.event_id))
        if fail:
            self.mgr.fail_loads(request_ids)
        else:
            self.mgr.complete_loads(request_ids)
        for request_id in request_ids:
            req = self.eng.running.get(request_id)
            if req is not None and req.waiting_for_load:
                req.waiting_for_load = False
                req.view.num_computed_tokens = 0 if fail else req.external_tokens

    @rule(data=st.data())
    def preempt(self, data):
        if self.eng.running:
            self.eng.preempt(data.draw(st.sampled_from(sorted(self.eng.running))))

    @rule(data=st.data())
    def abort(self, data):
        if self.eng.running:
            self.eng.abort(data.draw(st.sampled_from(sorted(self.eng.running))))

    @rule(roll=st.integers(0, 7))
    def reset(self, roll):
        if roll == 0:  # rare: a reset wipes the tier
            self.mgr.reset()

    # ----- invariants -----------------------------------------------------------------------------------------

    def _manager_cpu_pins(self) -> Counter:
        # Lookup hits, loads and store events (pending finish selections hold no CPU block until their step).
        return Counter(self.mgr.held_cpu_blocks())

    def _manager_device_pins(self) -> Counter:
        # Loads, store events, the finish flush (pinned at finish, committed by the next step) and the retry queue.
        pins = Counter(self.mgr.held_device_blocks())
        assert sum(pins.values()) == self.mgr.num_pinned_device_blocks()
        return pins

    @invariant()
    def ref_counts_balance(self):
        if not hasattr(self, "mgr"):
            return
        cpu_pins = self._manager_cpu_pins()
        cpu = self.mgr.cpu
        for block_id in range(1, cpu.num_blocks):
            assert cpu.ref_count(block_id) == cpu_pins[block_id], (
                block_id,
                cpu.ref_count(block_id),
                cpu_pins[block_id],
            )
        engine = Counter(b for req in self.eng.running.values() for b in req.owned)
        engine.update(b for req in self.eng.waiting for b in req.owned)
        device_pins = self._manager_device_pins()
        for block_id in range(1, self.device.num_blocks):
            expected = engine[block_id] + device_pins[block_id]
            assert self.device.ref_count(block_id) == expected, (block_id, self.device.ref_count(block_id), expected)

    @invariant()
    def keys_only_after_every_worker_completed(self):
        if not hasattr(self, "mgr"):
            return
        for cpu_id in self.mgr.stores.held_cpu_blocks():  # blocks being written, abandoned ones included
            assert not self.mgr.cpu.keys_of(cpu_id), (cpu_id, self.mgr.cpu.keys_of(cpu_id))

    @invariant()
    def boundary_stats_account_for_every_handoff(self):
        if hasattr(self, "mgr"):
            stats = self.mgr.boundary_stats
            assert stats.published == stats.accounted(), stats

    def teardown(self):
        if not hasattr(self, "mgr"):
            return
        for request_id in sorted(self.eng.running):
            self.eng.abort(request_id)
        self.eng.waiting.clear()
        for _ in range(50):
            self.eng.step()
            self._settle()
            if not self.mgr.has_pending_work():
                break
        assert not self.mgr.has_pending_work()
        assert self.mgr.cpu.num_pinned_blocks() == 0
        assert self.mgr.num_pinned_device_blocks() == 0
        assert all(self.device.ref_count(b) == 0 for b in range(1, self.device.num_blocks))


ManagerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_manager_state_machine = ManagerMachine.TestCase
