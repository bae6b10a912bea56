"""Composes the adapters. Its own modules are what every command shares: logging (logs, journald),
the token keeper (token, outage), the tick's Context and Options, the local policy performed
(policy). Its rooms, in import order (tests/repo/test_rooms.py): observe < apply < tick <
commands; each may import agent's own modules and the layers below (core, config, adapters).
"""
