"""moto as the AWS endpoint for local runs and tests: a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from moto.server import ThreadedMotoServer

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


def create_jobs_queues(name: str = "tollgate-jobs", max_receive_count: int = 5) -> JobsQueues:
    """The jobs FIFO queue and its FIFO dead-letter queue, configured like the deployed pair."""
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
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            ),
        },
    )["QueueUrl"]
    return JobsQueues(url, dlq_url)
