"""VIP mail first, even behind a backlog: the urgent lane.

A mail queue holds a backlog -- 1,200 newsletters (priority 100) and 300 cleanups (priority 30)
-- and the mail worker is busy draining it when three VIP mails (priority 150) arrive.  On a
queue made with ``urgent_lane=True`` every event above priority 100 travels in a lane of its own:
the worker gets the VIP mails at its next page, while the newsletters that were waiting wait a
little longer.  Run it:

    python examples/vip_jumps_the_backlog.py   # PGLOGQ_DSN, else the embedded PostgreSQL

It creates (or reuses) the queue "vip_backlog_demo", runs a ticker in-process, and drops the
queue at the end.
"""

from __future__ import annotations

import threading
import time

import pglogq

# test-expects: the 3 VIP mails started before the backlog was done: yes
# test-expects: each within a second of being sent: yes
# test-expects: the backlog kept its order: newsletters before cleanups, each in send order

QUEUE = "vip_backlog_demo"


def main() -> None:
    with pglogq.Client() as client:
        client.install_schema()  # idempotent: a no-op once pglogq is installed
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE, urgent_lane=True)
        client.subscribe(QUEUE, "mailer")
        client.send_batch(QUEUE, [{"n": i} for i in range(1200)], type="newsletter")  # priority 100
        client.send_batch(QUEUE, [{"n": i} for i in range(300)], type="cleanup", priority=30)
        client.tick(QUEUE, force=True)  # the backlog is there before the worker starts

        handled: list[tuple[str, int]] = []
        vip_started: list[float] = []
        vips_in = threading.Event()
        mailer = pglogq.Consumer(client, QUEUE, "mailer")

        @mailer.handler("vip")
        def vip_mail(msg: pglogq.Delivery) -> None:
            vip_started.append(time.monotonic())
            handled.append(("vip", msg.payload["n"]))
            if len(vip_started) == 3:
                vips_in.set()

        @mailer.handler()
        def routine_mail(msg: pglogq.Delivery) -> None:
            time.sleep(0.002)  # rendering and sending a mail
            handled.append((msg.type or "", msg.payload["n"]))

        ticker = pglogq.start_ticker(client)  # the pglogq-ticker daemon does this in production
        worker = threading.Thread(target=mailer.run, kwargs={"stop_when_idle": True})
        worker.start()
        time.sleep(0.5)  # the worker is busy with the backlog
        sent_at = time.monotonic()
        client.send_batch(QUEUE, [{"n": i} for i in range(3)], type="vip", priority=150)
        vips_in.wait(30)
        worker.join(60)
        ticker.stop()

        first_vip = next(i for i, (kind, _) in enumerate(handled) if kind == "vip")
        backlog = [h for h in handled if h[0] != "vip"]
        print(f"the 3 VIP mails started before the backlog was done: "
              f"{'yes' if first_vip < len(handled) - 3 and len(vip_started) == 3 else 'no'}"
              f" (after {first_vip} of 1,500 backlog mails)")
        print(f"each within a second of being sent: {'yes' if all(t - sent_at < 1 for t in vip_started) else 'no'}")
        expected = [("newsletter", i) for i in range(1200)] + [("cleanup", i) for i in range(300)]
        print("the backlog kept its order: newsletters before cleanups, each in send order"
              if backlog == expected else "the backlog order changed")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
