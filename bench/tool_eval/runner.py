"""``python -m bench tool-eval``: voice the set, run it, score it, print and write it.

    python -m bench tool-eval                           # engines, every agent, everything
    python -m bench tool-eval --agents tuning --set requests   # while developing
    python -m bench tool-eval --agents restaurant --server ws://127.0.0.1:8765/v1/voice
    python -m bench tool-eval --agent plain --set read  # the plain assistant's echo rate

``--agents``: ``all``, ``tuning``, ``held-out`` or names (``clinic,taxi``); each agent's
requests go to that agent (its instructions, greeting and tools). ``--agent`` (engines
mode) puts one agent in front of every request instead (what ``voxpipe serve --agent``
takes, or ``plain`` for the default assistant); the read sentences go to it, Luigi's by
default. In server mode the server's own agent answers, so one agent's requests at a time.

A held-out agent's per-request lines are never printed: its rows are in the JSON file
only, and the terminal shows its aggregate row (``dataset.py``). The results go to
``bench-results/tool-eval.json`` (``--out``); the options are in ``bench/cli.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.tool_eval import dataset, report, scoring
from bench.tool_eval.dataset import EvalAgent, Utterance
from bench.tool_eval.outcome import CalledTool, Outcome
from voxpipe.agent import Agent, default_agent, load_agent
from voxpipe.config import Config

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
RESTAURANT = "examples/restaurant/agent.py:agent"

Progress = Callable[[Utterance, Outcome], None]


def progress_printer(kind: str, held_out: bool, quiet: bool) -> Progress:
    """A line per answer on the terminal, except for a held-out agent's requests, which
    are seen in the JSON file only."""
    if quiet or held_out:
        return lambda u, o: None
    return lambda u, o: print(report.progress_line(kind, u.id, o), flush=True)


def _agent(ref: str, config: Config) -> Agent:
    return default_agent(config) if ref == "plain" else load_agent(ref)


def main(args: argparse.Namespace) -> int:
    from bench.tool_eval import engines_mode, server_mode
    from bench.tool_eval.voices import Voices

    if args.rescore:
        return rescore(args.rescore, args.out)
    if args.server and args.text:
        raise SystemExit("--text is for --engines: a server hears speech")
    config = Config.load(args.config)
    chosen = (
        dataset.select(dataset.agents(), args.agents) if args.set in ("all", "requests") else []
    )
    if args.server and len(chosen) > 1:
        raise SystemExit(
            "--server: the server's own agent answers; name the one it serves (--agents NAME)"
        )
    read = (
        dataset.read_sentences(recordings=dataset.librivox_recordings(LIBRIVOX))
        if args.set in ("all", "read")
        else []
    )
    asked = {a.name: a.requests[: args.limit] for a in chosen}
    read = read[: args.limit]
    speech = not args.text
    voices = Voices(args.audio_dir)
    if speech:
        everything = [u for requests in asked.values() for u in requests] + read
        made = voices.prepare(everything)
        print(f"speech: {len(everything)} utterances, {made} voiced now, in {voices.cache}")

    def progress(kind: str, held_out: bool = False) -> Progress:
        return progress_printer(kind, held_out, args.quiet)

    results: dict[str, Any] = {
        "mode": "server" if args.server else "engines",
        "speech": speech,
        "today": dt.date.today().isoformat(),
        "tools_supported": True,
        "tools_note": "",
        "llm": config.llm.model_dump(
            mode="json",
            include={"engine", "model_path", "temperature", "top_p", "seed", "max_tokens"},
        ),
        "agents": {},
    }
    outcomes: list[dict[str, Any]] = []
    scored: list[tuple[EvalAgent, dict[str, Any]]] = []
    if args.server:
        ask_all = server_mode.run

        def ask(agent: Agent | None, utterances: list[Utterance], p: Progress) -> list[Outcome]:
            return ask_all(args.server, utterances, voices.audio, p)

    else:
        print(f"loading the engines ({config.llm.engine} LLM) ...", flush=True)
        run = engines_mode.EngineRun(config, with_stt=speech)
        audio_of = voices.audio if speech else None

        def ask(agent: Agent | None, utterances: list[Utterance], p: Progress) -> list[Outcome]:
            assert agent is not None
            greeting = None if args.no_greeting else agent.greeting
            if not run.tools_supported and agent.python_tools:
                results["tools_supported"] = False
                results["tools_note"] = engines_mode.TOOLS_UNSUPPORTED
            return run.run(agent, utterances, audio_of, True, p, greeting)

    for eval_agent in chosen:
        agent = None if args.server else _agent(args.agent or eval_agent.ref, config)
        requests = asked[eval_agent.name]
        half = "held out" if eval_agent.held_out else "tuning"
        print(f"agent {eval_agent.name} ({half}): {len(requests)} requests", flush=True)
        answers = ask(agent, requests, progress("request", eval_agent.held_out))
        # the expected arguments are for the agent's own tools, whoever was asked
        normalize = scoring.normalizer_for(eval_agent, load_agent(eval_agent.ref))
        scores = scoring.score_requests(
            list(zip(requests, answers, strict=True)), normalize, eval_agent.facts
        )
        scored.append((eval_agent, scores))
        results["agents"][eval_agent.name] = {
            "held_out": eval_agent.held_out,
            "agent": args.server or args.agent or eval_agent.ref,
            "greeting": None if agent is None or args.no_greeting else agent.greeting,
            **scores,
        }
        outcomes += _outcomes(requests, answers)
        _write(args.out, {**results, "summary": scoring.summary(scored), "outcomes": outcomes})
    if chosen:
        results["summary"] = scoring.summary(scored)
    if read:
        reader = None if args.server else _agent(args.agent or RESTAURANT, config)
        answers = ask(reader, read, progress("read"))
        results["read"] = {
            "agent": args.server or args.agent or RESTAURANT,
            **scoring.score_echo(list(zip(read, answers, strict=True))),
        }
        outcomes += _outcomes(read, answers)
    results["outcomes"] = outcomes
    print()
    print(report.render(results))
    _write(args.out, results)
    print(f"\nwrote {args.out}")
    return 0


def rescore(run: Path, out: Path) -> int:
    """Score a run's answers again with today's scoring and checker, without a model: the
    requests are looked up in today's data by id (an id no longer there is an error)."""
    results = json.loads(run.read_text())
    answers = {o["id"]: _outcome(o) for o in results.get("outcomes", []) if o["kind"] == "request"}
    scored = []
    for eval_agent in dataset.select(dataset.agents(), ",".join(results.get("agents", {}))):
        if eval_agent.name not in results["agents"]:
            continue
        pairs = [(u, answers[u.id]) for u in eval_agent.requests if u.id in answers]
        normalize = scoring.normalizer_for(eval_agent, load_agent(eval_agent.ref))
        scores = scoring.score_requests(pairs, normalize, eval_agent.facts)
        scored.append((eval_agent, scores))
        results["agents"][eval_agent.name].update(scores)
    if scored:
        results["summary"] = scoring.summary(scored)
    results["rescored_from"] = str(run)
    print(report.render(results))
    _write(out, results)
    print(f"\nwrote {out}")
    return 0


def _outcome(row: dict[str, Any]) -> Outcome:
    return Outcome(
        row["id"],
        heard=row["heard"],
        reply=row["reply"],
        calls=[CalledTool(c["name"], c["arguments"]) for c in row["calls"]],
        error=row["error"],
        seconds=row["seconds"],
        router=row.get("router", {}),
        unbacked_claim=row.get("unbacked_claim"),
    )


def _write(out: Path, results: dict[str, Any]) -> None:
    """Written after each agent too, so a run cut short keeps the agents it finished."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


def _outcomes(utterances: list[Utterance], outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [
        {
            "kind": u.kind,
            "agent": u.agent if u.kind == "request" else None,
            "text": u.text,
            "voice": u.voice,
            "channel": u.channel,
            **o.to_dict(),
        }
        for u, o in zip(utterances, outcomes, strict=True)
    ]
