"""The `durable-workflow` SDK side of `bench/server_vs_native.py`: one SDK worker process.

`python -m bench.peers.sdk_worker URL TOKEN QUEUE`: an unmodified SDK `Worker` polling
`burrow server` at URL for `OneActivity` (one `noop` activity, the same steps as bench/app.py's),
until SIGTERM. It prints `ready` once constructed.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Generator
from typing import Any

from durable_workflow import Client, Worker, activity, workflow

WORKFLOW_CONCURRENCY = 16
ACTIVITY_CONCURRENCY = 32


@activity.defn(name="noop")
def noop(i: int) -> int:
    return i + 1


@workflow.defn(name="OneActivity")
class OneActivity:
    def run(self, ctx: Any, i: int) -> Generator[Any, Any, Any]:
        result = yield ctx.schedule_activity("noop", [i])
        return result


async def serve(url: str, token: str, queue: str) -> None:
    async with Client(url, token=token, namespace="default") as client:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[OneActivity],
            activities=[noop],
            poll_timeout=10,
            max_concurrent_workflow_tasks=WORKFLOW_CONCURRENCY,
            max_concurrent_activity_tasks=ACTIVITY_CONCURRENCY,
        )
        running = asyncio.create_task(worker.run())
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
        await worker.stop()
        await asyncio.gather(running, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], sys.argv[3]))
