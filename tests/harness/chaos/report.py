"""The chaos report as a Markdown table (for docs/reliability/)."""

from __future__ import annotations

from typing import Any

FAULT_LABELS: dict[str, str] = {
    "kill_consumer": "SIGKILL of a consumer / worker process (restarted 0.2-2 s later)",
    "worker_renamed": "... of which came back under a new worker name (takeover)",
    "twin_consumer": "a second process under a live consumer's (or worker's) name for 2-6 s",
    "kill_producer": "SIGKILL of a producer process (restarted)",
    "kill_ticker": "SIGKILL of the ticker daemon (restarted 1-5 s later)",
    "server_crash": "`pg_ctl stop -m immediate`, then restart (crash recovery)",
    "forced_rotation": "forced rotation attempts (step 1 with force, then step 2)",
    "rotation_done": "... of which rotated (the others were not safe yet)",
    "held_rr_snapshot": "REPEATABLE READ snapshot held 3-10 s",
    "prepared_transaction": "prepared transactions (sends, committed or rolled back 2-10 s later)",
    "proxy_drop_after_commit": "proxy: connection cut right after COMMIT / Sync, before the reply",
    "proxy_drop_mid_stream": "proxy: connection cut after another message",
    "proxy_partition": "proxy: every connection cut, new ones refused 0.5-3 s",
    "idle_in_transaction_timeout": "consumer session killed by a 100 ms idle_in_transaction_session_timeout",
    "statement_timeout": "statement cancelled by a 1 ms statement_timeout",
    "kill_share_holder": "attempts to SIGKILL a share worker holding a lease (stopped first; back under a new name)",
    "share_lease_orphaned": "... kills that left a lease behind (confirmed in the database; taken over)",
    "kill_share_holder_none": "... attempts that found no share worker holding a lease (tried again 1 s later)",
    "retention_pass": "retention pass with max_consumer_lag = 2 s (retention mode)",
    "retention_moved": "... of which moved a consumer that fell behind",
    "reinstall_schema": "`install_schema()` re-run while everything runs (retention and share modes)",
    "move_slots": "`cluster_admin.move_slots` of a range holding a producer's key, to another shard (sharded mode)",
    "shard_crash": "`pg_ctl stop -m immediate` of one shard's server, restarted 0.5-2 s later (sharded mode)",
    "move_while_gated": "... of which made although a consumer was still gated after --settle-moves seconds",
    "move_not_made": "... moves still waiting for the gates when the faults ended (not made)",
    "key_moved_refusal": "sends refused by a shard because the key had moved (PQ078; sharded mode)",
    "exited_consumer": "consumer processes that exited by themselves (restarted)",
    "exited_producer": "producer processes that exited by themselves (restarted)",
    "exited_ticker": "ticker daemons that exited by themselves (restarted)",
}


def render_markdown(report: dict[str, Any]) -> str:
    s = report["sends"]
    lines = [
        f"Seed {report['seed']}, {report['duration_s']:.0f} s of faults, {report['wall_s']:.0f} s in all; "
        f"drained: {'yes' if report['drained'] else 'NO'}; "
        f"cursor or tick regressions: {len(report.get('cursor_regressions', []))}; "
        f"result: **{'passed' if report['passed'] else 'FAILED'}**.",
        "",
        "| sends | count |",
        "| ----- | ----: |",
        f"| attempted | {s['attempted']} |",
        f"| acknowledged (ok) | {s['ok']} |",
        f"| certainly not committed (failed, rolled back) | {s['failed']} |",
        f"| indeterminate (connection lost after the statement / COMMIT, or producer killed) | {s['indeterminate']} |",
        "",
        "| fault | injected |",
        "| ----- | -------: |",
    ]
    faults = report["faults"]
    order = [k for k in FAULT_LABELS if k in faults] + sorted(k for k in faults if k not in FAULT_LABELS)
    for kind in order:
        n = faults[kind]
        lines.append(f"| {FAULT_LABELS.get(kind, kind)} | {n} |")
    lines += [
        "",
        "| subscriber | lost | unexpected | duplicated | indeterminate delivered / absent | dead-lettered"
        " | redelivered after nack | deliveries |",
        "| ---------- | ---: | ---------: | ---------: | -------------------------------: | ------------:"
        " | ---------------------: | ---------: |",
    ]
    for name, v in report["subscribers"].items():
        lines.append(
            f"| {name} | {v['lost']} | {v['unexpected']} | {v['duplicated']} | "
            f"{v['indeterminate_delivered']} / {v['indeterminate_absent']} | {v['dead_lettered']} | "
            f"{v['redelivered_after_nack']} | {v['deliveries']} |"
        )
    if report.get("mode") in ("keyed", "sharded"):
        lines += keyed_lines(report)
    if report.get("mode") == "share":
        lines += share_lines(report)
    if report.get("mode") == "sharded":
        lines += sharded_lines(report)
    return "\n".join(lines) + "\n"


def keyed_lines(report: dict[str, Any]) -> list[str]:
    """The keyed mode's table: per-key order and keys in flight at two workers (both must be 0)."""
    lines = [
        "",
        f"Keyed mode: {report.get('partitions')} partitions"
        + (f" on each of {len(report['shards'])} shards." if report.get("mode") == "sharded" else "."),
        "",
        "| subscriber | keyed deliveries | per-key order violations | same key in flight"
        " | takeovers of a silent worker's partition |",
        "| ---------- | ---------------: | -----------------------: | -----------------:"
        " | ---------------------------------------: |",
    ]
    for name, v in report["subscribers"].items():
        lines.append(f"| {name} | {v['keyed_deliveries']} | {v['per_key_order_violations']} | "
                     f"{v['same_key_in_flight']} | {v['takeovers']} |")
    return lines


def share_lines(report: dict[str, Any]) -> list[str]:
    """The share mode's table: one event in flight at two live workers (must be 0), and the
    leases taken over from silent workers."""
    lines = [
        "",
        "Share mode: `c3` is a share consumer (three worker processes, plus those brought back under new names).",
        "",
        "| subscriber | deliveries in recorded pages | same event in flight at two workers"
        " | events of a killed holder handed to another worker"
        " | leases taken over from a silent worker | ... from one that was still alive"
        " | effects applied twice | events done without their effect |",
        "| ---------- | ---------------------------: | ----------------------------------:"
        " | ------------------------------------------------:"
        " | -------------------------------------: | --------------------------------:"
        " | --------------------: | -------------------------------: |",
    ]
    for name, v in report["subscribers"].items():
        lines.append(f"| {name} | {v['paged_events']} | {v['same_event_in_flight']} | {v['rerun_after_kill']} | "
                     f"{v['lease_takeovers']} | "
                     f"{v['expired_live_holders']} | {v.get('effects_applied_twice', '-')} | "
                     f"{v.get('done_without_effect', '-')} |")
    return lines


def sharded_lines(report: dict[str, Any]) -> list[str]:
    """The sharded mode's figures: moves, crashes, duplicates not explained by a crash."""
    shards = report.get("shards", {})
    lines = [
        "",
        f"Sharded mode: {len(shards)} servers ("
        + ", ".join(f"{n} on core {v.get('cpu')}" for n, v in shards.items())
        + f"); slot moves done: {report.get('moves_done')}, failed: {report.get('moves_failed')}, "
        f"unfinished at the end: {len(report.get('moves_unfinished') or [])}; producer keys moved at least once: "
        f"{report.get('keys_moved')}; map version at the end: {report.get('map_version')}; shard crashes: "
        + (", ".join(f"{c['shard']} ({c['down_s']} s down)" for c in report.get("crashes", [])) or "none")
        + ".",
        "",
        "| subscriber | duplicates (same retry count, no crash between) | repeats explained by a crash or kill |",
        "| ---------- | ----------------------------------------------: | ----------------------------------: |",
    ]
    for name, v in report["subscribers"].items():
        lines.append(f"| {name} | {v.get('duplicates')} | {v.get('duplicates_explained_by_a_crash')} |")
    return lines
