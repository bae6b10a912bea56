"""Hypothesis profiles for the fuzz suite (tests/fuzz).

CI runs the ``fuzz-ci`` profile (500 examples per property, 5,000 in all: the suite takes tens of
seconds). ``MONKY_FUZZ=deep .venv/bin/pytest tests/fuzz`` runs many more per property, locally;
``MONKY_FUZZ=quick`` (``scripts/test-fast.sh``) 25 per property.
The profiles are applied per test (``FUZZ`` in ``tests/fuzz/strategies.py``), never loaded
globally, so they do not change the settings of other test directories.
"""
