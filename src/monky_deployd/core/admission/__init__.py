"""What a release may do on this box, judged before anything changes: the local policy (the key
table, its judges, host paths, names, the judged model), the compose file's checks, the bundle,
an apply's checks. May import: core's own modules, core.render, core.signing,
core.wire.checkin, core.records.applied, core.lifecycle.jobs.
"""
