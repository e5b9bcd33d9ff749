"""uvicorn's WebSocket protocol, with a text frame that is not UTF-8 left to the call.

A text message must be UTF-8 (RFC 6455, 8.1), and the connection that receives
one that is not must fail with close code 1007. uvicorn decodes text frames
itself, before the application sees them; on a bad one it logs an ERROR with a
traceback and closes 1007 on its own, so the caller gets no typed error and
anyone can fill the log. This protocol keeps uvicorn's and changes only that
case: the application receives a ``websocket.receive`` message with neither
``text`` nor ``bytes`` and an :data:`~voxpipe.transports.base.INVALID_TEXT` key
saying what was wrong, and the transport answers it in its own protocol
(``transports/base.py``, :func:`~voxpipe.transports.base.end_on_invalid_text`)
before it closes 1007 itself.
"""

from __future__ import annotations

from typing import Any, cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from voxpipe.transports.base import INVALID_TEXT


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """``uvicorn.Config(ws=WebSocketProtocol)``: text that is not UTF-8 reaches the app."""

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = b"".join(self.frames)
            try:
                if not data.isascii():  # JSON events mostly are: no second decode for them
                    data.decode()
            except UnicodeDecodeError as exc:
                self.frames = []
                detail = f"{exc.reason} at byte {exc.start} of {len(data)}"
                event = {"type": "websocket.receive", "text": None, "bytes": None}
                self.queue.put_nowait(cast(Any, {**event, INVALID_TEXT: detail}))
                if not self.read_paused:  # as for any message: read on once the app takes it
                    self.read_paused = True
                    self.transport.pause_reading()
                return
        super().send_receive_event_to_app()
