"""An agent that puts callers through to a person (``transfer_call``), for
tests/e2e/test_transfer.py."""

from voxpipe.agent import Agent
from voxpipe.agent.call_control import transfer_call_to

agent = Agent(
    instructions=(
        "You are a restaurant's phone agent. When the caller asks to speak to a person, "
        "call transfer_call."
    ),
    tools=[transfer_call_to("+15550199")],
)
