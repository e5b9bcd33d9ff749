"""An agent that can hang up (``end_call``), for tests/e2e/test_end_call.py."""

from voxpipe.agent import Agent
from voxpipe.agent.call_control import end_call

agent = Agent(
    instructions=(
        "You are a restaurant's phone agent. When the caller says goodbye, say a short "
        "goodbye and call end_call."
    ),
    tools=[end_call],
)
