"""The webhook dispatcher on moto: the same state machine definition the CDK stack deploys, executed by
moto's state machine interpreter, its Lambda task dispatched in-process to the project's attempt use case.

moto's interpreter reaches Lambda through http://localhost:$MOTO_PORT, so the port of our moto server is
put in MOTO_PORT; the Lambda "function" exists in moto only so that its ARN resolves, and
``LambdaFunction._invoke_lambda`` is replaced to call the Python function registered for its name.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Callable
from typing import Any

import boto3

from tollgate.delivery import DISPATCHER_DEFINITION

DEFINITION = DISPATCHER_DEFINITION
ATTEMPT_FUNCTION = "tollgate-webhook-attempt"
DISPATCHER = "tollgate-webhook-dispatcher"

Handler = Callable[[dict[str, Any]], dict[str, Any]]
_handlers: dict[str, Handler] = {}
_installed = threading.Lock()
# What the patch replaced, while it is in place: moto's own invoke and its executor setting.
_undo: list[Callable[[], None]] = []


def _install() -> None:
    """Patches moto once per process while any dispatcher is registered (``release_dispatcher`` undoes
    it when the last one goes, so nothing of a stopped local system stays in moto)."""
    with _installed:
        if _undo:
            return
        from moto.awslambda.models import LambdaFunction
        from moto.core.config import default_user_config

        setting = default_user_config["stepfunctions"]
        executes = setting["execute_state_machine"]
        setting["execute_state_machine"] = True
        original = LambdaFunction._invoke_lambda

        def invoke(self: Any, event: Any = None) -> tuple[str, bool, str]:
            handler = _handlers.get(self.function_name)
            if handler is None:
                return original(self, event)
            payload = json.loads(event) if isinstance(event, str | bytes) else (event or {})
            try:
                return json.dumps(handler(payload)), False, ""
            except Exception as error:  # surfaces as a task failure the state machine's Retry sees
                return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}), True, ""

        LambdaFunction._invoke_lambda = invoke  # type: ignore[method-assign]

        def undo() -> None:
            LambdaFunction._invoke_lambda = original  # type: ignore[method-assign]
            setting["execute_state_machine"] = executes

        _undo.append(undo)


def release_dispatcher(state_machine_arn: str) -> None:
    """Forgets the attempt handler of a dispatcher made by ``create_dispatcher``; the last one out takes the
    patch out of moto. The state machine itself stays in moto, whose state dies with its server."""
    suffix = state_machine_arn.rsplit(":", 1)[-1].removeprefix(DISPATCHER)
    with _installed:
        _handlers.pop(f"{ATTEMPT_FUNCTION}{suffix}", None)
        if not _handlers and _undo:
            _undo.pop()()


def _placeholder_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "handler.py", "def handler(event, context):\n    raise RuntimeError('dispatched in-process')\n"
        )
    return buffer.getvalue()


def create_dispatcher(attempt: Handler, suffix: str = "") -> str:
    """Registers ``attempt`` as the attempt Lambda and creates the dispatcher; returns its ARN."""
    _install()
    function_name = f"{ATTEMPT_FUNCTION}{suffix}"
    _handlers[function_name] = attempt
    iam = boto3.client("iam")
    role_name = f"tollgate-dispatcher{suffix}"
    try:
        role = iam.get_role(RoleName=role_name)["Role"]["Arn"]
    except iam.exceptions.NoSuchEntityException:
        role = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = boto3.client("lambda")
    try:
        function_arn = lam.get_function(FunctionName=function_name)["Configuration"]["FunctionArn"]
    except lam.exceptions.ResourceNotFoundException:
        function_arn = lam.create_function(
            FunctionName=function_name,
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": _placeholder_zip()},
        )["FunctionArn"]
    definition = DEFINITION.read_text(encoding="utf-8").replace("${WebhookAttemptFunctionArn}", function_arn)
    sfn = boto3.client("stepfunctions")
    arn: str = sfn.create_state_machine(name=f"{DISPATCHER}{suffix}", definition=definition, roleArn=role)[
        "stateMachineArn"
    ]
    return arn
