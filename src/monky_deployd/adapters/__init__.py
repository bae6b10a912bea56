"""Thin I/O: the network (net/) and the box (box/), and the helpers both share (fsutil, fsread,
deadline, httpio, tls, signatures, accounts). net and box never import each other. May import:
core, config.
"""
