"""What a scheduled rule's runs do to PostgreSQL, declared on the rule's CloudFormation resource: the idle
cost model (``tollgate_dev.costs``, README's table) reads it from the template instead of guessing.

A scheduled rule with no declaration is counted as connecting on every run: a paused Aurora cluster resumes
for each. A rule declared here connects only while clients hold WebSocket connections, at most once per the
interval it names; an idle stage has none, so its cluster may pause between the other ticks.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events

# The rule resource's Metadata key, and the value of its "Wakes" field.
METADATA_KEY = "Tollgate::DatabaseWakes"
WHILE_CLIENTS_CONNECTED = "while-clients-connected"


def wakes_database_while_clients_connected(rule: events.Rule, *, at_most_every: cdk.Duration) -> None:
    """Declares that ``rule``'s runs reach PostgreSQL only while a client is connected, and then at most once
    per ``at_most_every``."""
    cfn_rule = rule.node.default_child
    assert isinstance(cfn_rule, events.CfnRule)
    cfn_rule.add_metadata(
        METADATA_KEY,
        {"Wakes": WHILE_CLIENTS_CONNECTED, "EverySeconds": int(at_most_every.to_seconds())},
    )
