"""The operator commands' pure parts: doctor's checks, the systemd units, file access, the
one-command fixes, status's verdict, plan's diff. May import: every other room of core.
"""
