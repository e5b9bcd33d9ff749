"""``python -m bench tool-eval``: does the agent call the right tool, with the right
arguments, when a caller asks aloud, and does it answer rather than repeat the caller?

- ``requests.yaml``: what callers say to Luigi's (``examples/restaurant``), a quarter of it
  needing no tool, with the tool and arguments each request should produce; and read
  sentences, for the echo rate.
- ``dataset.py`` reads it; ``voices.py`` voices it (Piper, a few in espeak-ng) into a cache.
- ``engines_mode.py`` runs it through the engines alone (STT, then the LLM with the tools);
  ``server_mode.py`` through a live server over the native protocol.
- ``scoring.py`` scores tool selection and arguments; ``echo.py`` defines an echo.
- ``runner.py`` is the command: it runs, prints a table and writes the JSON.
"""
