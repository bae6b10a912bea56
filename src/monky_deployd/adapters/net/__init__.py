"""The network: transport (plain or Ziti), tenancy, OpenBao, the registry. May import: core,
config, adapters' own modules (never adapters.box).
"""
