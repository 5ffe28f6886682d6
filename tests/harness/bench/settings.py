"""How long and how big each scenario runs: the full run and the ``--quick`` smoke run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Settings:
    quick: bool
    point_seconds: float  # duration of one throughput measurement (one system, one case, one round)
    rounds: int  # produce: every case is measured this many times, systems interleaved; median kept
    clients: tuple[int, ...]  # producer client counts
    batch_sizes: tuple[int, ...]  # send_batch sizes
    backlog: int  # events preloaded for the drain scenario
    backlog_tick_every: int  # events between two ticks while preloading
    page_size: int  # max_messages of the SQL-level drain
    latency_seconds: float  # offered-load duration per rate, measured
    latency_warmup_seconds: float  # offered load before it on the same sessions, reported apart
    latency_rates: tuple[int, ...]
    baseline_latency_rates: tuple[int, ...]
    peer_latency_rates: tuple[int, ...]  # PgQue, the closest peer (its targets row needs 1,000/s)
    fanout_subscribers: tuple[int, ...]
    fanout_events: int
    held_seconds: float  # per phase (without / with the held snapshot)
    held_rate: int  # offered load of the held-xmin scenario, events/s
    held_rotation_seconds: int  # rotation_period during that scenario
    held_bucket_seconds: float  # throughput-over-time resolution
    held_warmup_seconds: float  # load before the measured window of each held-xmin phase
    held_sample_seconds: float  # every table's size and dead tuples are read this often
    held_producers: int  # producer processes sharing the held-xmin offered load
    large_batch_events: int
    bystander_events: int  # events stored in another queue for the second latency run
    partition_workers: tuple[int, ...]  # worker counts of the partitions scenario (8 partitions)
    partition_events: int  # keyed events drained per worker count
    partition_handler_ms: float  # the handler's sleep per event
    vip_backlog: int  # events waiting when the VIP mails are sent (4/5 newsletters, 1/5 cleanups)
    vip_after_seconds: float  # into the drain
    vip_trials: int  # with the urgent lane
    vip_baseline_trials: int  # without it (the VIP mails wait for the backlog)
    jobs_long_seconds: float  # the long job of the mixed job workload
    jobs_short: int  # short jobs sent 50 ms after it
    jobs_trials: int  # share consumer
    jobs_baseline_trials: int  # cooperating workers, the jobs table
    share_drain_jobs: int  # share_jobs: no-op jobs a drain point handles one at a time (x10 by 100)
    share_held_seconds: float  # share_jobs: time under the held snapshot before its drains (the full run: 10 min)
    share_held_rate: int  # share_jobs: jobs/s each system handles meanwhile (and the metadata's rate)
    share_sample_seconds: float  # share_jobs: the metadata tables are read this often under the snapshot
    share_dead_interval: float  # share_jobs: the takeover queue's dead_interval, seconds
    share_takeover_warmup: float  # share_jobs: worker B runs this long before the window before the kill
    shard_counts: tuple[int, ...]  # clusters of the shards scenario (1, 2, 3 shards)
    shard_servers: bool  # shards on embedded servers of their own (pinned); False: databases of the bench server
    shard_clients: int  # producer processes of the shards scenario
    shard_events: int  # keyed events drained by the Consumer, per cluster
    shard_overhead_rounds: int  # interleaved rounds of Client vs ShardedClient
    queue_counts: tuple[int, ...]  # queues scenario: database sizes at which every call is measured
    queue_hot_counts: tuple[int, ...]  # sizes at which only send, receive and ack are (--queues-hot)
    queue_repeat: int  # steady samples per call and size
    queue_sessions: int  # new sessions per call and size (the first call of a session)
    history_events: int  # history: events of each no-op drain (history on, then off)
    history_rounds: int  # history: interleaved rounds of those two drains
    history_outcomes: int  # history: outcomes of one consumer that jobs() pages through
    history_repeat: int  # history: timings of each jobs() page (median kept)
    history_rate: float  # history: jobs/s whose results a client waits for
    history_seconds: float  # history: how long those jobs are sent
    history_meta_events: int  # history: events through a held snapshot, log on and off (metadata growth)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FULL = Settings(
    quick=False,
    point_seconds=2.0,
    rounds=3,
    clients=(1, 4, 16),
    batch_sizes=(100, 1000),
    backlog=200_000,
    backlog_tick_every=5_000,
    page_size=10_000,
    latency_seconds=15.0,
    latency_warmup_seconds=1.0,
    latency_rates=(100, 1_000, 10_000),
    baseline_latency_rates=(100, 1_000, 10_000),
    peer_latency_rates=(100, 1_000, 10_000),
    fanout_subscribers=(1, 3, 10),
    fanout_events=100_000,
    held_seconds=300.0,
    held_rate=2_000,
    held_rotation_seconds=60,
    held_bucket_seconds=10.0,
    held_warmup_seconds=20.0,
    held_sample_seconds=5.0,
    held_producers=2,
    large_batch_events=1_000_000,
    bystander_events=1_000_000,
    partition_workers=(1, 2, 4, 8),
    partition_events=4_000,
    partition_handler_ms=2.0,
    vip_backlog=15_000,
    vip_after_seconds=1.0,
    vip_trials=20,
    vip_baseline_trials=1,
    jobs_long_seconds=10.0,
    jobs_short=1_000,
    jobs_trials=20,
    jobs_baseline_trials=3,
    share_drain_jobs=1_000,
    share_held_seconds=600.0,
    share_held_rate=1_000,
    share_sample_seconds=5.0,
    share_dead_interval=5.0,
    share_takeover_warmup=5.0,
    shard_counts=(1, 2, 3),
    shard_servers=True,
    shard_clients=4,
    shard_events=60_000,
    shard_overhead_rounds=5,
    queue_counts=(1, 100, 1_000),
    queue_hot_counts=(),
    queue_repeat=15,
    queue_sessions=3,
    history_events=100_000,
    history_rounds=7,
    history_outcomes=1_000_000,
    history_repeat=20,
    history_rate=100.0,
    history_seconds=20.0,
    history_meta_events=20_000,
)

QUICK = Settings(
    quick=True,
    point_seconds=0.3,
    rounds=1,
    clients=(1, 4),
    batch_sizes=(1000,),
    backlog=5_000,
    backlog_tick_every=1_000,
    page_size=10_000,
    latency_seconds=1.0,
    latency_warmup_seconds=0.5,
    latency_rates=(100, 1_000, 10_000),
    baseline_latency_rates=(100,),
    peer_latency_rates=(1_000,),
    fanout_subscribers=(1, 3, 10),
    fanout_events=2_000,
    held_seconds=3.0,
    held_rate=1_000,
    held_rotation_seconds=2,
    held_bucket_seconds=0.5,
    held_warmup_seconds=1.0,
    held_sample_seconds=0.5,
    held_producers=2,
    large_batch_events=60_000,
    bystander_events=100_000,
    partition_workers=(1, 4),
    partition_events=400,
    partition_handler_ms=2.0,
    vip_backlog=3_000,
    vip_after_seconds=0.5,
    vip_trials=2,
    vip_baseline_trials=0,
    jobs_long_seconds=0.5,
    jobs_short=100,
    jobs_trials=2,
    jobs_baseline_trials=1,
    share_drain_jobs=40,
    share_held_seconds=2.0,
    share_held_rate=100,
    share_sample_seconds=0.5,
    share_dead_interval=1.0,
    share_takeover_warmup=0.5,
    shard_counts=(1, 3),
    shard_servers=False,
    shard_clients=2,
    shard_events=2_000,
    shard_overhead_rounds=2,
    queue_counts=(1, 10),
    queue_hot_counts=(),
    queue_repeat=3,
    queue_sessions=1,
    history_events=2_000,
    history_rounds=1,
    history_outcomes=20_000,
    history_repeat=3,
    history_rate=100.0,
    history_seconds=2.0,
    history_meta_events=2_000,
)
