#!/usr/bin/env python3
"""Submit a task to Flow from Python and follow it to its end.

A client that is not Flow's own: PyPI's nats-py. It publishes the task
request on the JetStream subject `flow.tasks.submit` (the request ID as
`Nats-Msg-Id`, so a repeat is dropped), reads the per-rack outcome on
`flow.events.submit.<request_id>`, then follows each task's events on
`flow.events.task.<task_id>` from the first one (the events are kept on the
FLOW_EVENTS stream) until it finishes.

    FLOW_NATS_URL=nats://127.0.0.1:4222 python3 submit_and_follow.py rack-01 power_on

Exit 0 when every task completed, 1 when one did not or was refused, 2 on
a usage or connection error.
"""

import asyncio
import json
import os
import re
import sys
import uuid

import nats
from nats.js.api import DeliverPolicy

TIMEOUT_S = float(os.environ.get("FLOW_EXAMPLE_TIMEOUT", "120"))


def outcome_subject(request_id: str) -> str:
    # Every character but ASCII letters, digits, '-' and '_' becomes '_'
    # (shared/protocol/src/subjects.rs).
    return "flow.events.submit." + re.sub(r"[^A-Za-z0-9_-]", "_", request_id)


async def follow(js, task_id: str) -> bool:
    """Prints the task's events; True when it completed."""
    sub = await js.subscribe(
        f"flow.events.task.{task_id}",
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    try:
        while True:
            msg = await sub.next_msg(timeout=TIMEOUT_S)
            event = json.loads(msg.data)
            kind = event["kind"]
            if kind == "stage_started":
                print(f"{task_id} stage {event['stage']} started (steps {event['steps']})")
            elif kind == "step_finished":
                print(f"{task_id} step {event['step_index']} {event['status']} ({event['calls']} calls)")
            elif kind == "task_finished":
                print(f"{task_id} task_finished {event['status']} {event['message']}".rstrip())
                return event["status"] == "completed"
    finally:
        await sub.unsubscribe()


async def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rack, operation = sys.argv[1], sys.argv[2]
    url = os.environ.get("FLOW_NATS_URL", "nats://127.0.0.1:4222")
    try:
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    except Exception as e:  # noqa: BLE001 (any connection failure is exit 2)
        print(f"cannot connect to {url}: {e}", file=sys.stderr)
        return 2
    js = nc.jetstream()
    request_id = f"py-{uuid.uuid4()}"
    # Subscribe to the outcome before publishing: it is published once.
    outcome = await nc.subscribe(outcome_subject(request_id))
    request = {"request_id": request_id, "racks": [rack], "operation": operation}
    await js.publish(
        "flow.tasks.submit",
        json.dumps(request).encode(),
        headers={"Nats-Msg-Id": request_id},
    )
    reply = json.loads((await outcome.next_msg(timeout=TIMEOUT_S)).data)
    if "error" in reply:
        print(f"refused: {reply['error']['message']}", file=sys.stderr)
        await nc.close()
        return 1
    ok = True
    for r in reply["result"]["results"]:
        if "task_id" not in r:
            print(f"{r['rack']}: refused: {r.get('error', {}).get('message', r)}", file=sys.stderr)
            ok = False
            continue
        print(f"{r['rack']}: task {r['task_id']}")
        ok = await follow(js, r["task_id"]) and ok
    await nc.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
