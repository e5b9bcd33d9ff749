"""The command line of the research benchmarks: ``python -m bench COMMAND``.

Each command starts its own servers (or cluster) and writes to ``bench-results/``. A
command's module is imported only when it runs, so ``--help`` and one benchmark do not load
the others.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from voxpipe.engines.model_files import DEFAULT_LLM, LLM_FILES


def cmd_conversation(args: argparse.Namespace) -> int:
    from bench.conversation import main as conversation_main

    return conversation_main(args)


def cmd_transports(args: argparse.Namespace) -> int:
    from bench.transports import main as transports_main

    return transports_main(args)


def cmd_caller(args: argparse.Namespace) -> int:
    from bench.caller_bench import main as caller_main

    return caller_main(args)


def cmd_turn_model(args: argparse.Namespace) -> int:
    from bench.turn_model import main as turn_model_main

    return turn_model_main(args)


def cmd_cluster(args: argparse.Namespace) -> int:
    from bench.cluster import main as cluster_main

    return cluster_main(args)


def cmd_stt(args: argparse.Namespace) -> int:
    from bench.stt import main as stt_main

    return stt_main(args)


def cmd_tool_calls(args: argparse.Namespace) -> int:
    from bench.tool_calls import main as tool_calls_main

    return tool_calls_main(args)


def cmd_tool_eval(args: argparse.Namespace) -> int:
    from bench.tool_eval.runner import main as tool_eval_main

    return tool_eval_main(args)


def cmd_tool_turns(args: argparse.Namespace) -> int:
    from bench.tool_turns import main as tool_turns_main

    return tool_turns_main(args)


def cmd_batch(args: argparse.Namespace) -> int:
    from bench.batch import main as batch_main

    return batch_main(args)


def cmd_llm_speed(args: argparse.Namespace) -> int:
    from bench.llm_speed import main as llm_speed_main

    return llm_speed_main(args)


def cmd_concurrency(args: argparse.Namespace) -> int:
    from bench.concurrency import main as concurrency_main

    return concurrency_main(args)


def cmd_overlap(args: argparse.Namespace) -> int:
    from bench.overlap import main as overlap_main

    return overlap_main(args)


def cmd_barge_in_vad(args: argparse.Namespace) -> int:
    from bench.barge_in_vad import main as barge_in_vad_main

    return barge_in_vad_main(args)


def cmd_claim_delay(args: argparse.Namespace) -> int:
    from bench.claim_delay import main as claim_delay_main

    return claim_delay_main(args)


def cmd_confirm_cost(args: argparse.Namespace) -> int:
    from bench.confirm_cost import main as confirm_cost_main

    return confirm_cost_main(args)


def cmd_sip_vs_twilio(args: argparse.Namespace) -> int:
    from bench.sip_vs_twilio import main as sip_vs_twilio_main

    return sip_vs_twilio_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    batch = sub.add_parser(
        "batch", help="LLM tokens/s at 1-8 sequences and Whisper transcripts/s at batch 1-4"
    )
    batch.add_argument("--config", type=Path)
    batch.add_argument("--out", type=Path, default=Path("bench-results/batch.json"))
    batch.set_defaults(func=cmd_batch)

    overlap = sub.add_parser(
        "overlap", help="backchannels and interruptions over the reply, on a Twilio line"
    )
    overlap.add_argument("--each", type=int, default=30, help="backchannels, and interruptions")
    overlap.add_argument(
        "--kinds",
        default="backchannel,interruption",
        help="which overlaps to say (each keeps its voice and point in the reply)",
    )
    overlap.add_argument(
        "--turn",
        type=json.loads,
        default={},
        help='turn settings for the server, as JSON: {"min_interruption_ms": 150}',
    )
    overlap.add_argument("--out", type=Path, default=Path("bench-results/overlap.json"))
    overlap.set_defaults(func=cmd_overlap)
    barge_in_vad = sub.add_parser(
        "barge-in-vad",
        help="offline: how soon the VAD hears speech over the agent, per opening rule",
    )
    barge_in_vad.add_argument("--each", type=int, default=30, help="backchannels, interruptions")
    barge_in_vad.add_argument(
        "--quiet",
        type=lambda text: [float(s) for s in text.split(",") if s],
        default=[3.0],
        help="also heard after the caller's question and these seconds of quiet (comma list)",
    )
    barge_in_vad.add_argument("--out", type=Path, default=Path("bench-results/barge-in-vad.json"))
    barge_in_vad.set_defaults(func=cmd_barge_in_vad)
    confirm_cost = sub.add_parser(
        "confirm-cost", help="what a readback and the caller's yes cost on Luigi's bookings"
    )
    confirm_cost.add_argument("--requests", type=int, default=12, help="spoken requests")
    confirm_cost.add_argument("--out", type=Path, default=Path("bench-results/confirm-cost.json"))
    confirm_cost.set_defaults(func=cmd_confirm_cost)
    claim_delay = sub.add_parser(
        "claim-delay", help="the tokens the claim gate adds before a plain reply's first phrase"
    )
    claim_delay.add_argument(
        "--run", default="bench-results/claims-off-tuning-text.json", help="a tool-eval JSON"
    )
    claim_delay.add_argument("--step-ms", type=float, default=20.5, help="one decode step")
    claim_delay.set_defaults(func=cmd_claim_delay)

    llm_speed = sub.add_parser(
        "llm-speed", help="one embedded LLM's time to first token and decode ms/token"
    )
    llm_speed.add_argument("--llm", choices=sorted(LLM_FILES), default=DEFAULT_LLM)
    llm_speed.add_argument("--cold", type=int, default=2, help="turns with nothing cached")
    llm_speed.add_argument("--config", type=Path)
    llm_speed.add_argument("--out", type=Path, default=Path("bench-results/llm-speed.json"))
    llm_speed.set_defaults(func=cmd_llm_speed)

    concurrency = sub.add_parser(
        "concurrency",
        help="N concurrent Twilio callers: first answer audio p50/p95/p99 per N, queue wait "
        "apart from compute per stage",
    )
    concurrency.add_argument("--config", type=Path, help="base server config (JSON)")
    concurrency.add_argument("--callers", default="1,2,3,4", help="comma-separated levels")
    concurrency.add_argument("--turns", type=int, default=10, help="sentences per caller")
    concurrency.add_argument("--stagger-s", type=float, default=1.7)
    concurrency.add_argument(
        "--max-calls", type=int, help="the server's admission limit (default: the most callers)"
    )
    concurrency.add_argument("--gap-ms", type=int, default=1500)
    concurrency.add_argument("--pause-ms", type=int, default=300)
    concurrency.add_argument("--port", type=int, help="server port (default: a free one)")
    concurrency.add_argument("--out", type=Path, default=Path("bench-results/concurrency.json"))
    concurrency.set_defaults(func=cmd_concurrency)

    sip_vs_twilio = sub.add_parser(
        "sip-vs-twilio",
        help="first answer audio over SIP (RTP) against Twilio on the same clips, calls "
        "alternating: p50/p95/p99 per transport and their ratio",
    )
    sip_vs_twilio.add_argument("--config", type=Path, help="base server config (JSON)")
    sip_vs_twilio.add_argument("--calls", type=int, default=2, help="calls per transport")
    sip_vs_twilio.add_argument("--turns", type=int, default=6, help="sentences per call")
    sip_vs_twilio.add_argument(
        "--warmup-turns", type=int, default=1, help="a first call per transport, not counted"
    )
    sip_vs_twilio.add_argument("--gap-ms", type=int, default=1500)
    sip_vs_twilio.add_argument("--pause-ms", type=int, default=300)
    sip_vs_twilio.add_argument("--port", type=int, help="HTTP port (default: a free one)")
    sip_vs_twilio.add_argument("--out", type=Path, default=Path("bench-results/sip-vs-twilio.json"))
    sip_vs_twilio.set_defaults(func=cmd_sip_vs_twilio)

    conversation = sub.add_parser(
        "conversation", help="latency benchmark over a scripted spoken conversation"
    )
    conversation.add_argument("--config", type=Path)
    conversation.add_argument(
        "--reps", type=int, default=3, help="calls, each the whole conversation"
    )
    conversation.add_argument("--port", type=int, default=8799)
    conversation.add_argument("--out", type=Path, default=Path("bench-results/bench.json"))
    conversation.add_argument(
        "--interruptions", type=int, default=20, help="barge-ins to measure (0 = skip turn-taking)"
    )
    conversation.add_argument(
        "--preempt-reps", type=int, default=1, help="calls per mode, preemption on vs off"
    )
    conversation.set_defaults(func=cmd_conversation)

    transports = sub.add_parser(
        "transports", help="the bench conversation through every transport: overhead"
    )
    transports.add_argument("--config", type=Path)
    transports.add_argument("--calls", type=int, default=2, help="calls per transport")
    transports.add_argument("--turns", type=int, default=5, help="turns per call")
    transports.add_argument(
        "--transports", default="native,openai_realtime,twilio,webrtc", help="comma-separated"
    )
    transports.add_argument("--warmup-turns", type=int, default=1, help="native, not counted")
    transports.add_argument("--port", type=int, help="server port (default: a free one)")
    transports.add_argument("--out", type=Path, default=Path("bench-results/transports.json"))
    transports.set_defaults(func=cmd_transports)

    caller = sub.add_parser(
        "caller",
        help="what a caller hears over Twilio and native: first answer audio, fillers, "
        "interrupted answers, stage compute vs each engine alone",
    )
    caller.add_argument("--config", type=Path, help="base server config (JSON)")
    caller.add_argument("--calls", type=int, default=2, help="calls per transport")
    caller.add_argument("--turns", type=int, default=20, help="sentences per call")
    caller.add_argument(
        "--starts",
        type=int,
        default=1,
        help="fresh servers in turn; with 2 or more, each first call is compared with a later "
        "call of the same sentences",
    )
    caller.add_argument("--transports", default="twilio,native", help="comma-separated")
    caller.add_argument(
        "--gap-ms", type=int, default=1500, help="quiet after which the caller talks anyway"
    )
    caller.add_argument(
        "--pause-ms", type=int, default=300, help="the caller's pause after an answer"
    )
    caller.add_argument("--no-filler", action="store_true", help="serve with the filler off")
    caller.add_argument(
        "--tracing-compare",
        action="store_true",
        help="odd starts export every span over OTLP to a receiver here: first answer audio "
        "with tracing off and on, the same sentences paired (use --starts 2 or more)",
    )
    caller.add_argument(
        "--no-isolated", dest="isolated", action="store_false", help="skip the engines alone"
    )
    caller.add_argument("--port", type=int, help="server port (default: a free one)")
    caller.add_argument(
        "--timelines",
        type=Path,
        help="analyse the calls of an earlier run (its caller-timelines.json) instead of "
        "holding new ones",
    )
    caller.add_argument("--out", type=Path, default=Path("bench-results/caller.json"))
    caller.set_defaults(func=cmd_caller)

    cluster = sub.add_parser(
        "cluster", help="LocalCluster: TTFT with session affinity vs round-robin; failover"
    )
    cluster.add_argument("--sessions", type=int, default=3, help="sessions per mode")
    cluster.add_argument("--turns", type=int, default=5, help="turns per session")
    cluster.add_argument("--failovers", type=int, default=3, help="worker kills (0 = skip)")
    cluster.add_argument("--workers", type=int, default=2)
    cluster.add_argument("--warmup-turns", type=int, default=1, help="per worker, uncounted")
    cluster.add_argument("--port", type=int, help="nginx port (default: a free run)")
    cluster.add_argument("--redis-port", type=int, help="default: a free one")
    cluster.add_argument("--out", type=Path, default=Path("bench-results/cluster.json"))
    cluster.set_defaults(func=cmd_cluster)

    stt = sub.add_parser(
        "stt", help="Whisper in fitted windows vs the 30 s window: WER and compute time"
    )
    stt.add_argument("--config", type=Path)
    stt.add_argument("--reps", type=int, default=3, help="passes over the corpus")
    stt.add_argument("--buckets", help="fitted window lengths in s, e.g. 5,10,20,30")
    stt.add_argument(
        "--telephone", action="store_true", help="the clips as a phone call hears them (mu-law)"
    )
    stt.add_argument(
        "--pairs", action="store_true", help="also longer turns: pairs of clips, 0.3 s apart"
    )
    stt.add_argument("--out", type=Path, default=Path("bench-results/stt.json"))
    stt.set_defaults(func=cmd_stt)

    turn_model = sub.add_parser(
        "turn-model", help="Smart Turn: cost per check, paused sentences cut, end-of-turn delay"
    )
    turn_model.add_argument("--loops", type=int, default=50, help="checks timed alone")
    turn_model.add_argument(
        "--halves", action="store_true", help="paused clips from halves synthesized apart"
    )
    turn_model.add_argument(
        "--line",
        choices=("twilio", "clean"),
        default="twilio",
        help="twilio: each clip through 8 kHz mu-law and back, as a phone caller is heard",
    )
    turn_model.add_argument("--verbose", action="store_true", help="print every clip")
    turn_model.add_argument(
        "--thresholds",
        type=lambda text: [tuple(map(float, pair.split("/"))) for pair in text.split(",")],
        default=[(0.005, 0.0), (0.005, 0.05)],
        help="llm_turn_end_threshold/llm_turn_complete_threshold pairs to run "
        "(comma-separated, e.g. 0.005/0.05,0.01/0.1)",
    )
    turn_model.add_argument("--out", type=Path, default=Path("bench-results/turn-model.json"))
    turn_model.set_defaults(func=cmd_turn_model)

    tool_calls = sub.add_parser(
        "tool-calls",
        help="the embedded model's tool calls from typed requests: selection precision and "
        "recall, exact arguments, and time to first token with and without tools",
    )
    tool_calls.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    tool_calls.add_argument(
        "--variants", nargs="*", help="run only variants whose name contains one of these"
    )
    tool_calls.add_argument("--no-ttft", dest="ttft", action="store_false")
    tool_calls.add_argument("--out", type=Path, default=Path("bench-results/tool-calls.json"))
    tool_calls.set_defaults(func=cmd_tool_calls)

    tool_eval = sub.add_parser(
        "tool-eval",
        help="spoken requests to seven agents (tuning and held out): tool selection precision "
        "and recall, exact arguments, no-tool accuracy, invented facts, echoes",
    )
    where = tool_eval.add_mutually_exclusive_group()
    where.add_argument(
        "--engines", action="store_true", help="STT then LLM in this process (the default)"
    )
    where.add_argument("--server", metavar="URL", help="a live server's native endpoint (ws://…)")
    tool_eval.add_argument(
        "--agents",
        default="all",
        help="whose requests: all, tuning, held-out, or names separated by commas "
        "(bench/tool_eval/agents/)",
    )
    tool_eval.add_argument(
        "--agent",
        help="engines mode: ask every request of this agent instead of each one's own "
        "(what `voxpipe serve --agent` takes, or 'plain', the default assistant); the read "
        "sentences go to it (default: the restaurant)",
    )
    tool_eval.add_argument(
        "--set", choices=("all", "requests", "read"), default="all", help="which utterances"
    )
    tool_eval.add_argument(
        "--text", action="store_true", help="engines mode: give the model the written words"
    )
    tool_eval.add_argument(
        "--no-greeting",
        action="store_true",
        help="engines mode: the caller speaks first (by default the agent's greeting comes "
        "first, as in a call)",
    )
    tool_eval.add_argument(
        "--limit", type=int, help="at most this many requests per agent, and read sentences"
    )
    tool_eval.add_argument("--config", type=Path)
    tool_eval.add_argument(
        "--audio-dir", type=Path, default=Path("var/tool-eval-audio"), help="the voiced cache"
    )
    tool_eval.add_argument("--quiet", action="store_true", help="no lines per utterance")
    tool_eval.add_argument(
        "--rescore",
        type=Path,
        metavar="JSON",
        help="score a run's answers again (today's scoring and invented-fact checker), no model",
    )
    tool_eval.add_argument("--out", type=Path, default=Path("bench-results/tool-eval.json"))
    tool_eval.set_defaults(func=cmd_tool_eval)

    tool_turns = sub.add_parser(
        "tool-turns",
        help="first answer audio on tool turns against plain turns, in the same calls to the "
        "restaurant agent over Twilio and native: fillers, tool phrases, silences, failures",
    )
    tool_turns.add_argument("--config", type=Path, help="base server config (JSON)")
    tool_turns.add_argument("--calls", type=int, default=3, help="calls per transport")
    tool_turns.add_argument(
        "--turns", type=int, default=20, help="sentences per call, plain and tool in turn"
    )
    tool_turns.add_argument("--transports", default="twilio,native", help="comma-separated")
    tool_turns.add_argument(
        "--gap-ms", type=int, default=1500, help="quiet after which the caller talks anyway"
    )
    tool_turns.add_argument(
        "--pause-ms", type=int, default=300, help="the caller's pause after an answer"
    )
    tool_turns.add_argument("--port", type=int, help="server port (default: a free one)")
    tool_turns.add_argument(
        "--audio-dir", type=Path, default=Path("var/tool-eval-audio"), help="the voiced cache"
    )
    tool_turns.add_argument(
        "--timelines",
        type=Path,
        help="analyse the calls of an earlier run (its tool-turns-timelines.json) instead of "
        "holding new ones",
    )
    tool_turns.add_argument("--out", type=Path, default=Path("bench-results/tool-turns.json"))
    tool_turns.set_defaults(func=cmd_tool_turns)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
