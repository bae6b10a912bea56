"""What a tick is for and how a revision lives: the decision and its plans, update windows and
the rollout, locks, recovery and holds, the box steps, verify, the bake, the half-done repair,
jobs. May import: core's own modules, core.render, core.wire, core.records.
"""
