package main

import "github.com/gpubind/gpubind/spank/privdrop"

// dropPrivileges becomes uid/gid (with no supplementary groups) when running as root,
// before any user-controlled input is parsed, and keeps the launcher's parent-death
// signal (package privdrop). uid < 0 keeps the current identity.
func dropPrivileges(uid, gid int) error {
	return privdrop.Drop(uid, gid)
}
