#!/bin/sh
# Grant the monky-deployd agent read access to the Ziti identity directory (R1), in a way that
# survives ziti-edge-tunnel rewriting an identity file (write <file>.tmp, rename: a new inode
# without the old file's ACL):
#   - the agent user is a member of group `ziti` (the file stays ziti:ziti 0640): done by the
#     package postinst and install.sh, not here;
#   - a DEFAULT ACL on the directory gives group `ziti` and user monky-deployd read on every file
#     created there later (the rewrite's new inode inherits it);
#   - explicit ACLs on the directory (traverse) and on the files that exist now.
# Installed as /usr/lib/monky-deployd/identity-access; called by postinst and install.sh.
# Idempotent. Usage: identity-access [DIR]   (default /opt/openziti/etc/identities)
# Exit 0 when done or when DIR does not exist (nothing to grant yet); 1 on a setfacl failure.
set -eu

dir="${1:-/opt/openziti/etc/identities}"
user=monky-deployd
group=ziti

if [ ! -d "$dir" ]; then
  echo "identity-access: $dir does not exist yet; nothing to grant" >&2
  exit 0
fi
if ! command -v setfacl >/dev/null 2>&1; then
  echo "identity-access: setfacl missing (install the 'acl' package)" >&2
  exit 1
fi

# Files: read only. The explicit mask `m::r` keeps setfacl from widening the group class to the
# owning group's x/w bits (a file stays effectively 0640, as the contract says).
entries="g:$group:r,m::r"
getent passwd "$user" >/dev/null 2>&1 && entries="$entries,u:$user:r"
dir_entries="g:$group:rx"
getent passwd "$user" >/dev/null 2>&1 && dir_entries="$dir_entries,u:$user:rx"

# Default ACL: inherited by every file created in the directory later (the rewrite).
setfacl -d -m "$entries" "$dir"
# Access ACL on the directory itself: the agent may traverse and list it.
setfacl -m "$dir_entries" "$dir"
# Explicit ACLs on the files present now (kept for boxes whose tunneler changes group/mode).
for f in "$dir"/*; do
  [ -f "$f" ] || continue
  setfacl -m "$entries" "$f"
done
