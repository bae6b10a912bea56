"""Shared test helpers: the docker lab (real registry with htpasswd, a busybox image)."""
