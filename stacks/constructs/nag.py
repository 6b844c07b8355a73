"""cdk-nag acknowledgements, written one way so each lands in cdk.out/validation-report.json with its reason.

A rule id qualified with the pack's name (``AwsSolutions::AwsSolutions-IAM5[...]``) is matched by CDK's
own validation, which lists every suppressed finding, where it was acknowledged and why.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

NAG_PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge ``rule`` (e.g. ``AwsSolutions-L1`` or a finding ``AwsSolutions-IAM5[Resource::*]``)
    for ``scope`` and everything under it."""
    if not rule.startswith(f"{NAG_PACK}-"):
        raise ValueError(f"{rule!r} is not an {NAG_PACK} rule")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"{NAG_PACK}::{rule}", reason=reason))
