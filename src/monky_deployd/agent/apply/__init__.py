"""The apply path, loaded with one import (act): its checks (signatures, prepare), the box steps,
jobs, the half-done repair, recovery and the bake. May import: agent's own modules,
agent.observe.observe.
"""
