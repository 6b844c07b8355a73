"""Posting to a WebSocket connection: API Gateway's management API in a stage, the local server's own sockets
on 127.0.0.1. Both answer whether the connection is still there, so a gone one is forgotten at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_apigatewaymanagementapi import ApiGatewayManagementApiClient


class SendFailed(RuntimeError):
    """The message may not have reached a connection that is still there: the feed is not advanced past it."""


class Sender(Protocol):
    def post(self, connection_id: str, body: bytes) -> bool:
        """Sends one message; False when the connection is gone (the client left). SendFailed otherwise."""
        ...

    def close(self, connection_id: str) -> None:
        """Ends the connection from the server's side (a revoked key); a connection already gone is fine."""
        ...


class ApiGatewaySender:
    def __init__(self, client: ApiGatewayManagementApiClient) -> None:
        self._client = client

    def post(self, connection_id: str, body: bytes) -> bool:
        try:
            self._client.post_to_connection(ConnectionId=connection_id, Data=body)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in {"GoneException", "410"}:
                return False
            raise SendFailed(str(error)) from None
        except BotoCoreError as error:
            raise SendFailed(str(error)) from None
        return True

    def close(self, connection_id: str) -> None:
        try:
            self._client.delete_connection(ConnectionId=connection_id)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in {"GoneException", "410"}:
                raise SendFailed(str(error)) from None
        except BotoCoreError as error:
            raise SendFailed(str(error)) from None
