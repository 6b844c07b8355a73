"""moto as the AWS endpoint for local runs and tests: a real HTTP server on 127.0.0.1, the resources the
stacks would create (queues, the results bus with an example rule), the one patch moto needs to keep
DynamoDB's per-item atomicity, and one that keeps an SQS send's cost from growing with the queue's depth."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from tollgate.execution.limiter.dynamodb import KEY, TTL_ATTRIBUTE
from tollgate.jobtypes.registry import JOB_TYPES

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_REGION": "eu-west-1",
}


class LocalAws:
    """A moto server in this process; boto3 clients reach it through AWS_ENDPOINT_URL.

    The process's AWS variables point at this server only while it runs: ``stop`` puts back what was there,
    so a later server (or a test after this one) never inherits the address of one that is gone.
    """

    def __init__(self, port: int = 0) -> None:
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.endpoint_url = ""
        self._replaced: dict[str, str | None] = {}

    def start(self) -> str:
        # moto's server logs every request line through werkzeug; the system's own logs say more.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        # Only placeholders go in, so real credentials in the environment can never reach moto or AWS.
        # moto's state machine interpreter calls Lambda on localhost:$MOTO_PORT (default 5000).
        ours = {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": self.endpoint_url, "MOTO_PORT": str(port)}
        self._replaced = {name: os.environ.get(name) for name in ours}
        os.environ.update(ours)
        return self.endpoint_url

    def stop(self) -> None:
        self._server.stop()
        for name, value in self._replaced.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._replaced = {}


def create_documents_bucket(name: str) -> None:
    import boto3

    s3 = boto3.client("s3")
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if name not in existing:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


@dataclass(frozen=True)
class JobsQueues:
    url: str
    dlq_url: str


def create_jobs_queues(
    name: str = "tollgate-jobs", max_receive_count: int = 5, retention_days: int = 4
) -> JobsQueues:
    """A FIFO queue and its FIFO dead-letter queue, configured like a deployed job type's pair."""
    import boto3

    sqs = boto3.client("sqs")
    dlq_url = sqs.create_queue(
        QueueName=f"{name}-dlq.fifo",
        Attributes={"FifoQueue": "true", "MessageRetentionPeriod": str(14 * 24 * 3600)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={
            "FifoQueue": "true",
            "VisibilityTimeout": "60",
            "MessageRetentionPeriod": str(retention_days * 24 * 3600),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            ),
        },
    )["QueueUrl"]
    return JobsQueues(url, dlq_url)


def create_job_type_queues(prefix: str = "tollgate", max_receive_count: int = 5) -> dict[str, JobsQueues]:
    """Every registered job type's queue and DLQ, named as the stacks name them
    (``<prefix>-<queue>.fifo``, ``<prefix>-<queue>-dlq.fifo``), by job type. Idempotent."""
    return {
        name: create_jobs_queues(
            f"{prefix}-{job_type.queue}", max_receive_count, job_type.message_retention_days
        )
        for name, job_type in JOB_TYPES.items()
    }


def queue_urls(queues: Mapping[str, JobsQueues]) -> dict[str, str]:
    """The map JOB_QUEUE_URLS holds."""
    return {name: pair.url for name, pair in queues.items()}


def dlq_urls(queues: Mapping[str, JobsQueues]) -> dict[str, str]:
    """The map JOB_DLQ_URLS holds."""
    return {name: pair.dlq_url for name, pair in queues.items()}


@dataclass(frozen=True)
class ResultsBus:
    name: str
    source: str
    # The example subscriber: a rule for every completed event, whose target is this queue.
    subscriber_queue_url: str


LOCAL_RESULTS_BUS = "tollgate-local-results"
LOCAL_RESULTS_SOURCE = "tollgate.local"


def create_results_bus(
    name: str = LOCAL_RESULTS_BUS,
    source: str = LOCAL_RESULTS_SOURCE,
    *,
    detail_types: list[str] | None = None,
    rule_name: str = "completed-results",
) -> ResultsBus:
    """The results bus and an example subscriber, as the results stack deploys them: a rule matching the
    bus's source and ``detail_types`` (every completed event unless told), targeting an SQS queue. moto
    evaluates the rule's event pattern and sends each matching event to the queue. Idempotent."""
    import boto3

    from tollgate.events import EXTRACTION_COMPLETED

    events = boto3.client("events")
    sqs = boto3.client("sqs")
    if name not in {bus["Name"] for bus in events.list_event_buses().get("EventBuses", [])}:
        events.create_event_bus(Name=name)
    queue_url = sqs.create_queue(QueueName=f"{name}-{rule_name}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pattern = {"source": [source], "detail-type": detail_types or [EXTRACTION_COMPLETED]}
    events.put_rule(Name=rule_name, EventBusName=name, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=rule_name, EventBusName=name, Targets=[{"Id": "subscriber", "Arn": queue_arn}])
    return ResultsBus(name, source, queue_url)


def create_limiter_table(client: DynamoDBClient, name: str) -> None:
    """The limiter's table as the data stack makes it: on-demand, a string partition key, TTL on
    ``expires_at``. Idempotent."""
    try:
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceInUseException":
            raise
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
        )


def serialize_moto_dynamodb() -> Callable[[], None]:
    """Makes an in-process moto server apply DynamoDB requests one at a time; returns the undo.

    Real DynamoDB evaluates a condition and applies the update atomically per item. moto evaluates the
    condition, then applies the update, in separate steps, so two concurrent requests can both pass one
    condition (seen: 302 grants against a limit of 300 with 32 threads). This limiter's guarantees rest on
    that atomicity, so local runs, tests and benchmarks on moto need it restored.
    """
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.call_action
    if getattr(original, "_serialized", False):
        return lambda: None
    lock = threading.Lock()

    def call_action(self: Any) -> Any:
        with lock:
            return original(self)

    call_action._serialized = True  # type: ignore[attr-defined]
    DynamoHandler.call_action = call_action  # type: ignore[method-assign]

    def undo() -> None:
        DynamoHandler.call_action = original  # type: ignore[method-assign]

    return undo


# The one queue attribute moto reads on every send, which the patch below answers from the queue's field.
DEDUPLICATION_FLAG = "ContentBasedDeduplication"


class _QueueAttributes(Mapping[str, Any]):
    """moto's attribute dict of a queue, built only when asked for more than the deduplication flag."""

    def __init__(self, queue: Any, build: Callable[[Any], dict[str, Any]]) -> None:
        self._queue = queue
        self._build = build
        self._built: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self._built is None:
            self._built = self._build(self._queue)
        return self._built

    def get(self, key: str, default: Any = None) -> Any:
        if key == DEDUPLICATION_FLAG:
            # moto lists the flag for FIFO queues only, lower-cased like every boolean attribute it reports.
            if not self._queue.fifo_queue:
                return default
            value = self._queue.content_based_deduplication
            return str(value).lower() if isinstance(value, bool) else value
        return self._all().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class FlatAttributesProperty(property):
    """Marks moto's ``Queue.attributes`` as patched: a second system in the process does not patch twice."""


def keep_moto_sqs_sends_flat() -> Callable[[], None]:
    """Makes an in-process moto's SQS sends cost the same at any queue depth; returns the undo.

    moto 5 answers every ``queue.attributes.get("ContentBasedDeduplication")`` by building the whole
    attribute dict, which includes three approximate message counts, each a scan of every message in the
    queue with a clock read per message, six times per message sent: a SendMessageBatch of 10 into a queue
    holding 1,000 messages took about a second instead of a few milliseconds, and a burst of a thousand jobs
    with no worker taking them (tests, benchmarks) spent minutes of CPU there. Real SQS has no such cost.
    The flag is answered from the queue's own field; every other read of the attributes, GetQueueAttributes
    included, runs moto's code unchanged (``check_flat_sends`` compares the two answers).
    """
    from moto.sqs.models import Queue

    original = Queue.__dict__["attributes"]
    if isinstance(original, FlatAttributesProperty):
        return lambda: None
    build = original.fget
    Queue.attributes = FlatAttributesProperty(lambda queue: _QueueAttributes(queue, build))  # type: ignore[assignment,method-assign]

    def undo() -> None:
        Queue.attributes = original  # type: ignore[method-assign]

    return undo


def check_flat_sends() -> None:
    """The patched flag must say what moto's attribute dict says, for both kinds of queue and both settings
    of the flag; RuntimeError otherwise."""
    from moto.sqs import models

    # moto's type stubs call Queue abstract; it is the class moto itself instantiates for every queue.
    queue: Any = models.Queue
    samples = [
        queue("check-std", "eu-west-1", "000000000000"),
        queue("check.fifo", "eu-west-1", "000000000000", FifoQueue="true"),
        queue(
            "check-cbd.fifo", "eu-west-1", "000000000000", FifoQueue="true", ContentBasedDeduplication="true"
        ),
    ]
    for sample in samples:
        fast = sample.attributes.get(DEDUPLICATION_FLAG)
        full = dict(sample.attributes.items()).get(DEDUPLICATION_FLAG)
        if fast != full:
            raise RuntimeError(f"{sample.name}: the patched flag says {fast!r}, moto says {full!r}")
