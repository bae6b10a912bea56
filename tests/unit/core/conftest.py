"""Hypothesis settings for the pure core's unit tests.

``MONKY_HYPOTHESIS=mutation`` (set by bench/mutation.sh) makes every property test draw the same
examples on every run, with no example database and no deadline, so a mutant's verdict does not
depend on chance or on how loaded the machine is. Other runs keep Hypothesis' defaults.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("mutation", derandomize=True, database=None, deadline=None)
if os.environ.get("MONKY_HYPOTHESIS") == "mutation":
    settings.load_profile("mutation")
