"""PURE: no I/O, no clock, no logging (tests/repo/test_layers.py). What all of core shares is here:
the fault catalogue (errors.py), the exception tree (faults.py), stored times against a stepping
clock (clock.py). Its rooms, in the order they may import one another (tests/repo/test_rooms.py):
render < wire < records < lifecycle < admission < commands; each may import core's own modules.
"""
