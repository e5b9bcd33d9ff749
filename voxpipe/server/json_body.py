"""A small JSON request body (``POST /v1/tokens``, ``/v1/calls``), read to a bound and
validated by a pydantic model: every way it can be wrong is an ``error`` answer."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from voxpipe.conversation.events import ErrorCode
from voxpipe.server.webrtc_offers import error_response
from voxpipe.transports.base import Undecodable, decode_json, describe_error

M = TypeVar("M", bound=BaseModel)


async def json_body(request: Request, model: type[M], max_bytes: int, what: str) -> M | Response:
    """The body as ``model``; an empty body is the model's defaults (where it has them)."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                return error_response(
                    ErrorCode.MESSAGE_TOO_LARGE, f"a {what} is at most {max_bytes} bytes", 413
                )
    except ClientDisconnect:
        return Response(status_code=400)
    payload = decode_json(bytes(body), max_bytes) if body.strip() else {}
    if isinstance(payload, Undecodable):
        return error_response(payload.code, f"the body is not valid JSON: {payload.reason}")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        return error_response(ErrorCode.INVALID_EVENT, f"{what}: {describe_error(exc)}")
