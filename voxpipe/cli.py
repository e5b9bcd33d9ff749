"""``voxpipe`` command line: serve, cluster, call, models, agent, config, calls, load.

The research benchmarks are not here: they live in the top-level ``bench`` package
(``python -m bench``), which the product never imports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
import time
from pathlib import Path
from typing import Any

from voxpipe.config import Config
from voxpipe.engines.model_files import LLM_FILES
from voxpipe.observability.logs import escape


def _config(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, object]] = {}
    if getattr(args, "host", None):
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides.setdefault("server", {})["port"] = args.port
    config = Config.load(getattr(args, "config", None), **overrides)
    if getattr(args, "agent", None):
        config = config.model_copy(update={"agent": args.agent})
    return config


def listen_socket(config: Config) -> socket.socket:
    """The listening socket; accepted connections inherit its send-buffer bound."""
    family = socket.AF_INET6 if ":" in config.server.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if config.server.socket_send_buffer_bytes is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.server.socket_send_buffer_bytes)
    sock.bind((config.server.host, config.server.port))
    if not config.server.bind_when_ready:  # else uvicorn listens once the models are warm
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _configured_secrets(config: Config) -> list[str]:
    """The secrets in the configuration, which the log redaction removes wherever they appear."""
    found = [key.key.get_secret_value() for key in config.auth.api_keys]
    if config.auth.token_secret is not None:
        found.append(config.auth.token_secret.get_secret_value())
    if config.remote_llm.api_key:
        found.append(config.remote_llm.api_key)
    return found


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from voxpipe.agent import AgentLoadError, resolve_agent
    from voxpipe.observability import logs
    from voxpipe.server.app import create_app
    from voxpipe.server.lifecycle import DrainingServer
    from voxpipe.server.websocket_protocol import WebSocketProtocol

    config = _config(args)
    try:  # a bad agent stops here, before any model loads
        agent = resolve_agent(config)
    except AgentLoadError as exc:
        print(f"voxpipe: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    secrets = _configured_secrets(config)
    redact = logs.install(secrets)  # the supervisor's log, and ours before uvicorn starts
    json_logs = config.server.log_format == "json"  # workers read the same config and env
    if json_logs:
        logs.install_json(redact.redact)
    if args.workers > 1:
        from voxpipe.server.supervisor import Supervisor

        host, port = config.server.host, config.server.port
        print(
            f"voxpipe: {args.workers} workers on ws://{host}:{port}..{port + args.workers - 1}"
            "/v1/voice; each listens once warm (put nginx in front: `voxpipe cluster`)",
            flush=True,
        )
        return Supervisor(args.workers, port, host, args.config, agent=args.agent).run()
    app = create_app(config, agent=agent)
    url = f"ws://{config.server.host}:{config.server.port}/v1/voice"

    def announce() -> None:
        print(
            f"\nvoxpipe is ready. Talk to it at {url}\n"
            f"  try:    .venv/bin/voxpipe call hello.wav --out reply.wav\n"
            f"  health: http://{config.server.host}:{config.server.port}/readyz   "
            f"metrics: /metrics\n" + sip_line(config),
            flush=True,
        )

    app.state.voxpipe.on_ready.append(announce)
    print(
        f"voxpipe: loading and warming models; {url} accepts calls once /readyz is 200", flush=True
    )
    if not config.auth.api_keys:
        print("voxpipe: authentication is off (no API keys configured)", flush=True)
    elif config.auth.token_secret is None:
        print(
            "voxpipe: WARNING auth.token_secret is not set: POST /v1/tokens is refused and no "
            "browser token is accepted (set VOXPIPE_AUTH__TOKEN_SECRET, docs/security.md)",
            flush=True,
        )
    uvicorn_config = uvicorn.Config(
        app,
        host=config.server.host,
        port=config.server.port,
        log_level=config.server.log_level,
        ws=WebSocketProtocol,
        ws_max_size=config.server.max_message_bytes * 4,
        ws_ping_interval=config.server.heartbeat_s,
        ws_ping_timeout=config.server.heartbeat_s,
        timeout_graceful_shutdown=5,
    )
    logs.install(secrets)  # uvicorn's own handlers (access log) exist from here on
    if json_logs:
        logs.install_json(redact.redact)
    server = DrainingServer(uvicorn_config, app.state.voxpipe)
    server.run(sockets=[listen_socket(config)])
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    import signal

    from voxpipe.server.local_cluster import LocalCluster

    cluster = LocalCluster(
        Path(args.workdir), port=args.port, workers=args.workers, redis_port=args.redis_port
    )
    print(
        f"voxpipe cluster: redis :{args.redis_port}, {args.workers} workers on "
        f"{cluster.worker_ports}, nginx :{args.port}; logs in {args.workdir}",
        flush=True,
    )
    stop = False

    def on_signal(sig: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
        seconds = cluster.wait_ready()
        print(
            f"\nvoxpipe cluster is ready in {seconds:.0f} s. Talk to it at {cluster.ws}\n"
            f"  every connection with ?session_id=ID reaches the same worker; Ctrl-C stops\n",
            flush=True,
        )
        while not stop:
            time.sleep(0.5)
    finally:
        print("voxpipe cluster: stopping (draining the workers)", flush=True)
        cluster.stop()
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    from voxpipe.audio.pcm import read_wav, write_wav
    from voxpipe.clients.native_client import NativeClient

    audio, rate = read_wav(Path(args.file))

    async def run() -> int:
        async with NativeClient(args.url) as client:
            await client.connect()
            turn = await client.speak(audio, rate, timeout_s=args.timeout)
        # What a server sends is printed escaped: the server may not be ours.
        print(f"you said:  {escape(turn.transcript)}")
        print(f"agent:     {escape(turn.reply)}")
        print(f"status:    {escape(turn.status)}")
        stages = turn.metrics.get("stages_ms", {})
        if turn.voice_to_voice_ms is not None:
            print(f"voice-to-voice (client): {turn.voice_to_voice_ms:.0f} ms")
        for stage, ms in stages.items():
            print(f"  {escape(stage):<18}{ms:>9.1f} ms")
        for name, ms in turn.metrics.get("compute_ms", {}).items():
            print(f"  compute {escape(name):<10}{ms:>9.1f} ms")
        for part, ms in turn.metrics.get("split_ms", {}).items():  # docs/observability.md
            print(f"  split {escape(part):<12}" + ("        –" if ms is None else f"{ms:>9.1f} ms"))
        llm = turn.metrics.get("llm", {})
        if llm:
            print(
                f"  llm tokens: prefill {llm['prefill_tokens']} of {llm['prompt_tokens']} "
                f"prompt, {llm['completion_tokens']} generated"
            )
        if args.out and turn.audio:
            write_wav(Path(args.out), bytes(turn.audio), client.output_rate)
            seconds = len(turn.audio) / 2 / client.output_rate
            print(f"saved {seconds:.2f} s of reply audio to {args.out}")
        for error in client.errors:
            print(
                f"error: {escape(str(error['code']))}: {escape(str(error['message']))}",
                file=sys.stderr,
            )
        return 0 if turn.status == "completed" else 1

    return asyncio.run(run())


def cmd_models(args: argparse.Namespace) -> int:
    from voxpipe.engines.loader import describe_models

    config = _config(args)
    if args.llm:  # which pinned LLM to show or assemble (llm.model)
        config = config.model_copy(
            update={"llm": config.llm.model_copy(update={"model": args.llm, "model_path": None})}
        )
    for info in describe_models(config, assemble=args.assemble):
        state = (
            "remote"
            if info.remote
            else "ok"
            if info.path.exists()
            else "missing (run `make run` or `voxpipe models --assemble`)"
        )
        print(f"{info.stage:<4} {info.engine:<28} threads={info.threads}  {info.path}  [{state}]")
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    """The agent's instructions, greeting and every tool, MCP servers' tools found live."""
    from voxpipe.agent import AgentLoadError, RunningAgent, ToolDefinitionError, resolve_agent
    from voxpipe.agent.describe import describe

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        agent = resolve_agent(_config(args))
    except AgentLoadError as exc:
        print(f"voxpipe: {exc}", file=sys.stderr)
        return 2

    async def run() -> list[str]:
        async with await RunningAgent.start(agent) as running:
            return describe(running)

    try:
        lines = asyncio.run(run())
    except ToolDefinitionError as exc:  # an MCP server's definitions are not ours
        print(f"voxpipe: {escape(str(exc))}", file=sys.stderr)
        return 2
    print("\n".join(escape(line) for line in lines))  # an MCP server's names, descriptions
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.markdown:
        from voxpipe.config import markdown_reference

        print(markdown_reference(), end="")
        return 0
    print(json.dumps(_config(args).model_dump(mode="json"), indent=2))
    return 0


def cmd_calls(args: argparse.Namespace) -> int:
    """List past calls, or show one: its transcript and each turn's latency."""
    from voxpipe.server import redis_store, store

    config = _config(args).store
    path = args.db or config.path
    if config.backend == "redis" and args.db is None:

        def list_calls(limit: int) -> list[dict[str, Any]]:
            return redis_store.list_calls(config, limit)

        def show_call(session_id: str) -> dict[str, Any] | None:
            return redis_store.show_call(config, session_id)

    elif path is None or not Path(path).exists():
        print(f"no call database at {path} (store.path)", file=sys.stderr)
        return 1
    else:

        def list_calls(limit: int) -> list[dict[str, Any]]:
            return store.list_calls(Path(path), limit)

        def show_call(session_id: str) -> dict[str, Any] | None:
            return store.show_call(Path(path), session_id)

    if args.session_id is None:
        calls = list_calls(args.limit)
        if args.json:
            print(json.dumps(calls, indent=2))
            return 0
        print(f"{'call':16} {'session':34} {'started (UTC)':20} {'duration':>9} {'turns':>5}  end")
        for c in calls:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c["started_at"]))
            duration = "live" if c["duration_s"] is None else f"{c['duration_s']:.1f} s"
            if c["end_reason"] == "crashed":
                duration = "crashed"
            print(
                f"{escape(c['call_id']):16} {escape(c['session_id']):34} {started:20} "
                f"{duration:>9} {c['turns']:>5}  {escape(c['end_reason'] or '')}"
            )
        return 0
    call = show_call(args.session_id)
    if call is None:
        print(f"no call {args.session_id!r}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(call, indent=2))
        return 0
    latency = {t["turn_id"]: t for t in call["turns"]}
    ended = escape(call["end_reason"] or "live")
    if ended == "crashed":
        found = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(call["ended_at"]))
        ended = f"crashed (found {found} UTC; its owner may resume it)"
    print(
        f"call {escape(call['call_id'])}  session {escape(call['session_id'])}  "
        f"owner {escape(call['owner'])}  ended: {ended}"
    )
    for m in call["messages"]:
        turn = latency.get(m["turn_id"], {})
        extra = ""
        if m["role"] == "assistant":
            v2v = turn.get("voice_to_voice_ms")
            status = escape(str(m["status"]))
            extra = f"   [{status}, v2v {v2v:.0f} ms]" if v2v else f"   [{status}]"
        print(f"  {m['turn_id']:>3} {escape(m['role']):>9}: {escape(m['text'])}{extra}")
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from voxpipe.loadtest.load import main as load_main

    return load_main(args)


AGENT_HELP = "module:attr, path/file.py:attr or agent.yaml/.json (default: config's agent)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxpipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the server on the configured models")
    serve.add_argument("--config", type=Path, help="JSON config file (see docs/configuration.md)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes on consecutive ports from --port"
    )
    serve.add_argument("--agent", help=AGENT_HELP)
    serve.set_defaults(func=cmd_serve)

    cluster = sub.add_parser(
        "cluster", help="nginx + Redis + N workers on loopback, with session affinity"
    )
    cluster.add_argument("--workers", type=int, default=2)
    cluster.add_argument("--port", type=int, default=8765, help="nginx; workers take the next")
    cluster.add_argument("--redis-port", type=int, default=6390)
    cluster.add_argument("--workdir", default="var/cluster", help="configs and logs")
    cluster.set_defaults(func=cmd_cluster)

    call = sub.add_parser("call", help="speak a WAV file to a server and save the reply")
    call.add_argument("file", help="16-bit PCM WAV, any rate, mono or stereo")
    call.add_argument("--url", default="ws://127.0.0.1:8765/v1/voice")
    call.add_argument("--out", default="reply.wav", help="where to save the reply audio")
    call.add_argument("--timeout", type=float, default=60.0)
    call.set_defaults(func=cmd_call)

    models = sub.add_parser("models", help="show which models are used and where they live")
    models.add_argument("--config", type=Path)
    models.add_argument("--assemble", action="store_true", help="assemble the LLM weights now")
    models.add_argument(
        "--llm",
        choices=sorted(LLM_FILES),
        help="the pinned LLM to show or assemble instead of the configured one (llm.model)",
    )
    models.set_defaults(func=cmd_models)

    agent = sub.add_parser("agent", help="show the agent: instructions, tools, MCP servers' tools")
    agent.add_argument("--agent", help=AGENT_HELP)
    agent.add_argument("--config", type=Path)
    agent.set_defaults(func=cmd_agent)

    config = sub.add_parser("config", help="print the configuration in force")
    config.add_argument("--config", type=Path)
    config.add_argument("--markdown", action="store_true", help="print the reference as Markdown")
    config.set_defaults(func=cmd_config)

    calls = sub.add_parser("calls", help="list past calls, or show one call's transcript")
    calls.add_argument(
        "session_id", nargs="?", help="a call id or session id (or a prefix; a session's latest)"
    )
    calls.add_argument("--config", type=Path)
    calls.add_argument("--db", type=Path, help="SQLite file (default: store.path)")
    calls.add_argument("--limit", type=int, default=50)
    calls.add_argument("--json", action="store_true")
    calls.set_defaults(func=cmd_calls)

    load = sub.add_parser("load", help="concurrent simulated callers; find the machine's capacity")
    load.add_argument("--calls", type=int, default=4, help="concurrent callers (one step)")
    load.add_argument("--duration", type=float, default=60.0, help="seconds of calls per step")
    load.add_argument("--url", help="a running server's ws://.../v1/voice (default: start one)")
    load.add_argument("--max-calls", type=int, help="admission limit of the servers it starts")
    load.add_argument("--config", type=Path, help="config file for the servers it starts")
    load.add_argument("--reuse-server", action="store_true", help="one server for every step")
    load.add_argument("--find-capacity", action="store_true", help="search the most calls in SLO")
    load.add_argument("--slo-ms", type=float, default=1500.0, help="p99 voice-to-voice SLO")
    load.add_argument("--max-search-calls", type=int, default=64, help="capacity search cap")
    load.add_argument("--seed", type=int, default=0, help="callers' choice of clips and pauses")
    load.add_argument("--out", type=Path, default=Path("bench-results/load"), help="load.json/html")
    load.set_defaults(func=cmd_load)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def sip_line(config: Config) -> str:
    """Where SIP calls are answered, when the server answers them (docs/sip.md)."""
    sip = config.sip
    if not sip.enabled:
        return ""
    port = sip.port or "a free port (see the log)"
    return f"  SIP:    {'/'.join(sip.transports)} {sip.host}:{port} (sip:agent@<this host>)\n"


if __name__ == "__main__":
    sys.exit(main())
