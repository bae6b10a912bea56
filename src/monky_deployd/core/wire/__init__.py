"""The protocol with tenancy: the check-in, its answers, the report body. May import: core's
own modules, core.render.
"""
