"""``python -m bench tool-eval``: voice the set, run it, score it, print and write it.

    python -m bench tool-eval                           # engines, Luigi's, everything
    python -m bench tool-eval --server ws://127.0.0.1:8765/v1/voice
    python -m bench tool-eval --agent plain --set read  # the plain assistant's echo rate

``--agent`` (engines mode) is what ``voxpipe serve --agent`` takes, or ``plain`` for the
default assistant (``llm.system_prompt``, no tools). In server mode the server's own agent
answers. The results go to ``bench-results/tool-eval.json`` (``--out``); the options are
in ``bench/cli.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from bench.tool_eval import dataset, report, scoring
from bench.tool_eval.dataset import Utterance
from bench.tool_eval.outcome import Outcome
from voxpipe.agent import Agent, default_agent, load_agent
from voxpipe.config import Config

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")


def _agent(ref: str, config: Config) -> Agent:
    return default_agent(config) if ref == "plain" else load_agent(ref)


def main(args: argparse.Namespace) -> int:
    from bench.tool_eval import engines_mode, server_mode
    from bench.tool_eval.voices import Voices

    if args.server and args.text:
        raise SystemExit("--text is for --engines: a server hears speech")
    config = Config.load(args.config)
    agent = _agent(args.agent, config)
    requests = dataset.requests() if args.set in ("all", "requests") else []
    read = (
        dataset.read_sentences(recordings=dataset.librivox_recordings(LIBRIVOX))
        if args.set in ("all", "read")
        else []
    )
    if args.limit is not None:
        requests, read = requests[: args.limit], read[: args.limit]
    speech = not args.text
    voices = Voices(args.audio_dir)
    if speech:
        made = voices.prepare([*requests, *read])
        print(
            f"speech: {len(requests) + len(read)} utterances, {made} voiced now, in {voices.cache}"
        )

    def progress(kind: str) -> Any:
        if args.quiet:
            return lambda u, o: None
        return lambda u, o: print(report.progress_line(kind, u.id, o), flush=True)

    tools_supported, note = True, ""
    greeting = None if args.server or args.no_greeting else agent.greeting  # engines mode
    if args.server:
        mode, agent_name = "server", f"of {args.server}"
        ask = server_mode.run
        asked_requests = ask(args.server, requests, voices.audio, progress("request"))
        asked_read = ask(args.server, read, voices.audio, progress("read"))
    else:
        mode, agent_name = "engines", agent.name
        print(f"loading the engines ({config.llm.engine} LLM) ...", flush=True)
        run = engines_mode.EngineRun(config, with_stt=speech)
        tools_supported = run.tools_supported or not agent.python_tools
        if not run.tools_supported and agent.python_tools:
            note = engines_mode.TOOLS_UNSUPPORTED
            print(f"!! {note}: the model is asked without tools")
        audio_of = voices.audio if speech else None
        asked_requests = run.run(agent, requests, audio_of, True, progress("request"), greeting)
        asked_read = run.run(agent, read, audio_of, True, progress("read"), greeting)

    results: dict[str, Any] = {
        "mode": mode,
        "agent": agent_name,
        "speech": speech,
        "today": dt.date.today().isoformat(),
        "tools_supported": tools_supported,
        "tools_note": note,
        "instructions": agent.instructions,
        "greeting": greeting,
        "llm": config.llm.model_dump(
            mode="json",
            include={"engine", "model_path", "temperature", "top_p", "seed", "max_tokens"},
        ),
    }
    if requests:
        results["requests"] = scoring.score_requests(
            list(zip(requests, asked_requests, strict=True)), scoring.restaurant_normalizer()
        )
    if read:
        results["read"] = scoring.score_echo(list(zip(read, asked_read, strict=True)))
    results["outcomes"] = _outcomes(requests, asked_requests) + _outcomes(read, asked_read)
    print()
    print(report.render(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


def _outcomes(utterances: list[Utterance], outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [
        {"kind": u.kind, "text": u.text, "voice": u.voice, **o.to_dict()}
        for u, o in zip(utterances, outcomes, strict=True)
    ]
