"""Thin I/O on the box: the subprocess seam (runner), the grant file, the update-lock directory,
the systemd units. Its rooms, in import order: box < box.state < box.docker. May import: core,
config, adapters' own modules (never adapters.net).
"""
