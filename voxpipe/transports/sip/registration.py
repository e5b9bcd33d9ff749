"""Registration with a trunk or registrar (RFC 3261, section 10), so that it sends calls to
this server: ``sip.registrar``, ``sip.username``, ``sip.password``.

One binding, one task (:meth:`Registration.run`): REGISTER our Contact for
``sip.register_expires_s``; a ``401``/``407`` challenge is answered once with digest
credentials (:mod:`digest`; a second challenge for the same nonce means they are wrong); a
``423`` asks for at least its ``Min-Expires``; a ``2xx`` says what lifetime was granted
(our Contact's ``expires``, else ``Expires``), and the binding is renewed once 80% of it
has passed. A refusal, wrong credentials or no response is logged and tried again after
``sip.register_retry_s``. :meth:`Registration.close` (server shutdown) removes the binding
with ``Expires: 0``.

Every REGISTER of the binding has the same Call-ID and From tag and a rising CSeq (10.2);
over UDP it is sent again at T1, 2 T1 ... until answered, for at most
:data:`TRANSACTION_S`. Its answers reach :meth:`Registration.response_received` through the
user agent, by Call-ID.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Awaitable, Callable

from voxpipe.config import SipConfig
from voxpipe.transports.sip import digest
from voxpipe.transports.sip.call import T1_S, T2_S
from voxpipe.transports.sip.dialog import Flow
from voxpipe.transports.sip.message import (
    SIP_VERSION,
    SipResponse,
    bracketed,
    new_branch,
    new_request,
    new_tag,
    uri_of,
)
from voxpipe.transports.sip.outbound import Target, address_of_record, target_of

log = logging.getLogger("voxpipe.sip")

TRANSACTION_S = 8.0  # a REGISTER with no final response in this long has failed
UNREGISTER_S = 2.0  # how long shutdown waits for the binding's removal
RENEW_AT = 0.8  # the share of the granted lifetime after which the binding is renewed
MAX_CHALLENGES = 2  # challenges answered for one REGISTER (a stale nonce: once more)
_EXPIRES = re.compile(r";\s*expires\s*=\s*([0-9]{1,10})", re.IGNORECASE)


class RegistrationFailed(Exception):
    """The registrar refused, the credentials were wrong, or nothing answered."""


class Registration:
    """One binding of our Contact at ``sip.registrar``; :meth:`start` once the user agent
    listens, :meth:`close` at shutdown."""

    def __init__(
        self,
        config: SipConfig,
        flow_to: Callable[[Target], Awaitable[Flow]],
        local_host: Callable[[Flow], str],
    ) -> None:
        assert config.registrar and config.username and config.password
        self.config = config
        self.target = target_of(config.registrar)
        self.username = config.username
        self.aor = address_of_record(config) or ""
        self.call_id = f"{secrets.token_hex(12)}@voxpipe"
        self.registered_s = 0  # the lifetime the registrar granted last; 0: not registered
        self.registrations = 0  # successful REGISTERs (the first, and each renewal)
        self.flow_to = flow_to
        self._local_host = local_host
        self.flow: Flow | None = None  # to the registrar (a TCP connection: kept open)
        self._tag = new_tag()
        self._cseq = 0
        self._responses: asyncio.Queue[SipResponse] = asyncio.Queue(8)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="sip-register")

    async def run(self) -> None:
        """Register, renew, and after a failure try again, until cancelled."""
        while True:
            try:
                granted = await self.register(self.config.register_expires_s)
            except RegistrationFailed as exc:
                self.registered_s = 0
                log.error(
                    "sip: registration of %s at %s failed: %s; again in %g s",
                    self.aor,
                    self.target.uri,
                    exc,
                    self.config.register_retry_s,
                )
                await asyncio.sleep(self.config.register_retry_s)
                continue
            await asyncio.sleep(max(1.0, granted * RENEW_AT))

    async def close(self) -> None:
        """Stop renewing; a binding in place is removed (``Expires: 0``)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.registered_s:
            try:
                async with asyncio.timeout(UNREGISTER_S):
                    await self.register(0)
            except (RegistrationFailed, TimeoutError) as exc:
                log.warning("sip: unregistering %s failed: %s", self.aor, exc)
        if self.flow is not None:
            self.flow.close()

    def response_received(self, message: SipResponse) -> None:
        cseq = message.cseq
        if cseq is not None and cseq.method == "REGISTER" and cseq.number == self._cseq:
            with contextlib.suppress(asyncio.QueueFull):
                self._responses.put_nowait(message)

    async def register(self, expires_s: int) -> int:
        """One REGISTER (challenges answered); the lifetime granted (0: removed)."""
        if self.flow is None or self.flow.closed:  # a TCP connection: opened again
            try:
                self.flow = await self.flow_to(self.target)
            except Exception as exc:  # DialFailed: not resolvable, no connection
                raise RegistrationFailed(str(exc)) from exc
        flow = self.flow
        contact = self._contact(flow)
        credentials: tuple[str, str] | None = None
        answered: set[str] = set()  # nonces answered: the same one again is a refusal
        for _ in range(MAX_CHALLENGES + 2):  # + a 423's retry, + the last response
            response = await self._send(flow, contact, expires_s, credentials)
            if response.status in (401, 407):
                credentials = self._answer_challenge(response, answered)
            elif response.status == 423:
                minimum = (response.headers.get("min-expires") or "").strip()
                if not minimum.isdigit() or int(minimum) <= expires_s:
                    raise RegistrationFailed(f"423 with Min-Expires {minimum[:12]!r}")
                expires_s = int(minimum)
            elif 200 <= response.status < 300:
                granted = _granted(response, contact, expires_s)
                self.registered_s = granted
                if expires_s:
                    self.registrations += 1
                    log.info(
                        "sip: registered %s at %s for %d s", self.aor, self.target.uri, granted
                    )
                else:
                    log.info("sip: unregistered %s at %s", self.aor, self.target.uri)
                return granted
            else:
                raise RegistrationFailed(f"{response.status} {response.reason}")
        raise RegistrationFailed("challenged again and again")

    def _answer_challenge(self, response: SipResponse, answered: set[str]) -> tuple[str, str]:
        """The Authorization (401) or Proxy-Authorization (407) that answers ``response``."""
        proxy = response.status == 407
        value = response.headers.get("proxy-authenticate" if proxy else "www-authenticate")
        try:
            challenge = digest.parse_challenge(value or "")
        except digest.DigestError as exc:
            raise RegistrationFailed(f"{response.status}: {exc}") from exc
        if challenge.nonce in answered and not challenge.stale:
            raise RegistrationFailed(f"{response.status}: the credentials were refused")
        answered.add(challenge.nonce)
        assert self.config.password is not None
        value = digest.authorization(
            challenge,
            self.config.auth_username or self.username,
            self.config.password.get_secret_value(),
            "REGISTER",
            self._request_uri(),
        )
        return ("Proxy-Authorization" if proxy else "Authorization", value)

    async def _send(
        self, flow: Flow, contact: str, expires_s: int, credentials: tuple[str, str] | None
    ) -> SipResponse:
        """One REGISTER sent (again over UDP until answered); its final response."""
        self._cseq += 1
        while not self._responses.empty():  # responses to an earlier REGISTER
            self._responses.get_nowait()
        where = f"{bracketed(self._local_host(flow))}:{flow.local[1]}"
        out = new_request(
            "REGISTER",
            self._request_uri(),
            f"{SIP_VERSION}/{flow.transport} {where};branch={new_branch()};rport",
            f"<{self.aor}>;tag={self._tag}",
            f"<{self.aor}>",
            self.call_id,
            self._cseq,
            f"{contact};expires={expires_s}",
        )
        out.add("Expires", str(expires_s))
        if credentials is not None:
            out.add(*credentials)
        out.add("User-Agent", self.config.user_agent)
        data = out.encode()
        flow.send(data)
        wait = T1_S
        try:
            async with asyncio.timeout(TRANSACTION_S):
                while True:
                    try:
                        response = await asyncio.wait_for(
                            self._responses.get(), None if flow.reliable else wait
                        )
                    except TimeoutError:  # UDP: sent again (17.1.2.2)
                        flow.send(data)
                        wait = min(2 * wait, T2_S)
                        continue
                    if response.status >= 200:
                        return response
                    wait = T2_S  # a provisional response: re-sent at T2 until the final one
        except TimeoutError as exc:
            raise RegistrationFailed(f"no answer in {TRANSACTION_S:g} s") from exc

    def _request_uri(self) -> str:
        """The registrar's URI, as configured (no user part: 10.2)."""
        return self.target.uri

    def _contact(self, flow: Flow) -> str:
        where = bracketed(self._local_host(flow))
        transport = flow.transport.lower()
        return f"<sip:{self.username}@{where}:{flow.local[1]};transport={transport}>"


def _granted(response: SipResponse, contact: str, asked: int) -> int:
    """The lifetime the registrar gave our Contact: its ``expires`` in the 2xx's Contact
    list, else the 2xx's ``Expires``, else what we asked for (10.2.4)."""
    ours = uri_of(contact)
    for value in response.headers.all("contact"):
        if uri_of(value) == ours and (match := _EXPIRES.search(value.split(">", 1)[-1])):
            return int(match[1])
    expires = (response.headers.get("expires") or "").strip()
    return int(expires) if expires.isdigit() else asked
