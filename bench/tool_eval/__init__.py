"""``python -m bench tool-eval``: does an agent call the right tool, with the right
arguments, when a caller asks aloud; does it answer without one when none is needed; does it
make up what only a tool knows; and does it answer rather than repeat the caller?

- ``agents/``: seven agents of different trades (Luigi's, ``examples/restaurant``, and six
  written for the evaluation), each a data file of spoken requests with the tool and
  arguments each should produce, and a module of tools; half of the new ones are held out
  (never tuned on, their per-request results never printed). ``read.yaml``: read sentences,
  for the echo rate.
- ``dataset.py`` reads them; ``voices.py`` voices them (Piper, some in espeak-ng, some
  through a Twilio phone line) into a cache.
- ``engines_mode.py`` runs them through the engines alone (STT, then the LLM with the tools);
  ``server_mode.py`` through a live server over the native protocol.
- ``scoring.py`` scores tool selection and arguments per agent and per half; ``echo.py``
  defines an echo; ``invented.py`` an invented fact.
- ``runner.py`` is the command: it runs, prints the tables and writes the JSON.
"""
