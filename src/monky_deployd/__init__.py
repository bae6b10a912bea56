"""monky-deployd: the timer-driven deploy agent of the monky estate."""

from __future__ import annotations

import os

# pydantic looks for plugins (every installed distribution's entry points) when it builds its
# first model; the agent uses none. Set before any model is built; an operator's value stays.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

__version__ = "0.1.0"
USER_AGENT = f"monky-deployd/{__version__}"
