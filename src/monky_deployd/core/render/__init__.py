"""Text in and out: the .env rendered as compose reads it, the registry credential, the masker,
compose pull's errors read. May import: core's own modules.
"""
