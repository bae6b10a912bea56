"""Signed bundles, judged before anything else of a release: which release keys a box trusts
and how many must sign (trustcfg, config.yaml's ``trust:``), and each bundle's signatures,
version and expiry against that rule (trust). May import: core's own modules only.
"""
