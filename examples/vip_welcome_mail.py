"""Welcome mails, VIP users first: priority on a backlog.

Users sign up faster than the mail worker sends; each signup queues a welcome mail, VIP users'
with priority 150 ("user-triggered"), the others with 100 ("routine").  When the worker starts
on the backlog, every VIP mail goes out before any regular one; within a priority, in signup
(commit) order.  Run it:

    python examples/vip_welcome_mail.py        # PGLOGQ_DSN, else the embedded PostgreSQL

It creates (or reuses) the queue "welcome_mail_demo" and drops it at the end.
"""

from __future__ import annotations

import pglogq

# test-expects: first mails went to the VIPs: carol, frank, ivan
# test-expects: then the others in signup order: alice, bob, dave, erin, grace, heidi, judy
# test-expects: 10 mails sent, 0 failed

QUEUE = "welcome_mail_demo"
VIP, ROUTINE = 150, 100
SIGNUPS = [("alice", False), ("bob", False), ("carol", True), ("dave", False), ("erin", False),
           ("frank", True), ("grace", False), ("heidi", False), ("ivan", True), ("judy", False)]


def main() -> None:
    with pglogq.Client() as client:
        client.install_schema()  # idempotent: a no-op once pglogq is installed
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "mailer")

        # the sign-up code: one event per new user, in the user's own transaction
        for name, vip in SIGNUPS:
            client.send(QUEUE, {"user": name, "vip": vip}, type="user.signed_up",
                        priority=VIP if vip else ROUTINE)
            client.tick(QUEUE, force=True)  # the pglogq-ticker daemon ticks in production

        # the mail worker: one handler per event type
        sent: list[str] = []
        mailer = pglogq.Consumer(client, QUEUE, "mailer", max_messages=4)

        @mailer.handler("user.signed_up")
        def send_welcome_mail(msg: pglogq.Delivery) -> None:
            who = msg.payload["user"]
            sent.append(who)
            print(f"  mail to {who:6} (priority {msg.priority})")

        stats = mailer.run(stop_when_idle=True)  # drain the backlog, then return
        vips = [name for name, vip in SIGNUPS if vip]
        print(f"first mails went to the VIPs: {', '.join(sent[:len(vips)])}")
        print(f"then the others in signup order: {', '.join(sent[len(vips):])}")
        print(f"{stats.handled} mails sent, {stats.failed} failed")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
