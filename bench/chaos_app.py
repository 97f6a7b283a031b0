"""The chaos soak's App on task queue "chaos": workflows whose results follow from their inputs.

- Approval(i): two activities and a local one on their result, a short durable timer, then waits
  for the `approve` signal the soak runner sends (with `i` as its argument); returns
  `expected_approval(i)`.
- Chain(i, hops, total): one activity per run, then continues as new `hops` times; the last run
  returns `expected_chain(i, hops)`.

Activities retry quickly and without limit: an attempt lost to a killed worker is retried
after its lease expires, and a workflow only ends with its expected result.
"""

from __future__ import annotations

from burrow import App, activity, workflow

TASK_QUEUE = "chaos"
SIGNAL = "approve"
TIMER_SECONDS = 0.2
CHAIN_HOPS = 2
ACTIVITY_TIMEOUT_SECONDS = 30
RETRY = workflow.RetryPolicy(initial_interval=0.2, maximum_interval=1.0)
LOCAL = workflow.LocalActivityOptions(
    start_to_close_timeout=ACTIVITY_TIMEOUT_SECONDS, retry_policy=RETRY
)


@activity.defn(name="chaos_add")
async def add(a: int, b: int) -> int:
    return a + b


@activity.defn(name="chaos_double")
async def double(a: int) -> int:
    return 2 * a


def expected_approval(i: int) -> str:
    """Approval(i)'s result when signalled `approve(i)`."""
    return f"approved {i}: {2 * (i + 1)}+{i}"


def expected_chain(i: int, hops: int = CHAIN_HOPS) -> int:
    """Chain(i, hops, 0)'s result: each of its hops + 1 runs adds i + 1."""
    return (hops + 1) * (i + 1)


@workflow.defn(name="ChaosApproval")
class Approval:
    def __init__(self) -> None:
        self.approved: int | None = None

    @workflow.signal(name=SIGNAL)
    def approve(self, value: int) -> None:
        self.approved = value

    @workflow.run
    async def run(self, i: int) -> str:
        one = await workflow.activity(
            add, i, 1, start_to_close_timeout=ACTIVITY_TIMEOUT_SECONDS, retry_policy=RETRY
        )
        two = await workflow.activity(
            double, one, start_to_close_timeout=ACTIVITY_TIMEOUT_SECONDS, retry_policy=RETRY
        )
        # A local step on the queued result (A3): warm, it runs with that result's write.
        two = await workflow.local_activity(add, two, 0, options=LOCAL)
        await workflow.sleep(TIMER_SECONDS)
        await workflow.wait_condition(lambda: self.approved is not None)
        return f"approved {i}: {two}+{self.approved}"


@workflow.defn(name="ChaosChain")
class Chain:
    @workflow.run
    async def run(self, i: int, hops: int, total: int) -> int:
        total = await workflow.activity(
            add, total, i + 1, start_to_close_timeout=ACTIVITY_TIMEOUT_SECONDS, retry_policy=RETRY
        )
        if hops > 0:
            workflow.continue_as_new(i, hops - 1, total)
        return total


app = App(task_queue=TASK_QUEUE, workflows=[Approval, Chain], activities=[add, double])
