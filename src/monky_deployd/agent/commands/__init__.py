"""The operator's commands: status, plan, doctor, bundle. May import: every other room of agent."""
