"""The test kit: loopback reference fakes of tenancy and OpenBao, the Docker lab (registry,
busybox image) and the end-to-end lab. Used by tests/, bench/ and scripts/; never by the agent
(a test holds that), and not shipped in the .deb."""
