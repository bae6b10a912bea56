"""What the state dir holds, as models with their exact bytes, and the ledger; the tick record,
an apply's reasons and the token's plan from its record. May import: core's own modules,
core.render, core.wire.
"""
