"""monky-deployd: the timer-driven deploy agent of the monky estate."""

from __future__ import annotations

__version__ = "0.1.0"
USER_AGENT = f"monky-deployd/{__version__}"
