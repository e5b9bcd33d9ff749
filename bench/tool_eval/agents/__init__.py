"""The agents of the tool evaluation: one data file (``<name>.yaml``: held out or not, owned
facts, the spoken requests) and one module of tools (``<name>.py``) each; Luigi's data file
points at ``examples/restaurant``. ``bench/tool_eval/dataset.py`` reads them."""
