"""SIP, directly (``docs/sip.md``): voxpipe answers calls from a SIP trunk or a softphone
itself, with no media-stream provider between. The modules follow the protocol's layers:
``message`` (SIP's text), ``sdp`` (offer and answer), ``rtp``, ``jitter`` and ``dtmf`` (the
media), ``media`` (one call's RTP socket), ``dialog`` (a call's state and the requests it
sends), ``call`` (one call and its session), ``user_agent`` (the sockets and what each request
gets). The server's side, admission and lifetime, is ``server/sip_calls.py``."""
