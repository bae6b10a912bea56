"""The state directory: its layout, the records read and written, the tick lock, the outbox, the
revision dirs, what is set aside, ownership. May import: core, config, adapters' own modules,
adapters.box.
"""
