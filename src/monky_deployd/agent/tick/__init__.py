"""The timer's tick: observe, decide, act, publish in order (tick.py), and what it publishes
(the report, the ledger, the metrics textfile). May import: agent's own modules,
agent.observe.observe, agent.apply.
"""
