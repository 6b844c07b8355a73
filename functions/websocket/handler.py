"""WebSocket route Lambda: $connect records the connection, $disconnect forgets it, subscribe starts the feed
from the client's cursor; anything else gets an error message."""

from typing import Any
from uuid import UUID

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from tollgate.notify.messages import BadMessage
from tollgate.notify.service import TooManyConnections, connect, disconnect, subscribe
from tollgate.settings import NotificationSettings
from tollgate.wiring import build_notify

logger = Logger(service="tollgate-websocket")

deps = build_notify(NotificationSettings(), entrypoint="websocket")  # type: ignore[call-arg]  # from the environment


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = event["requestContext"]
    route, connection_id = request["routeKey"], request["connectionId"]
    if route == "$connect":
        authorizer = request["authorizer"]
        try:
            connect(deps, connection_id, UUID(authorizer["tenant_id"]), UUID(authorizer["key_id"]))
        except TooManyConnections as error:
            logger.warning("connection refused", extra={"reason": str(error)})
            return {"statusCode": 429, "body": str(error)}
    elif route == "$disconnect":
        disconnect(deps, connection_id)
    elif route == "subscribe":
        subscribe(deps, connection_id, event.get("body"))
    else:
        deps.sender.post(connection_id, BadMessage('the only action is "subscribe"').reply.encode())
    return {"statusCode": 200}
