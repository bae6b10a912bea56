"""Observe: what the box and tenancy say before a decision, read once (the check-in, the records,
the locks, a new revision's pace, status's recorded view). May import: agent's own modules.
"""
