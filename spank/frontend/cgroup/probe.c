/*
 * The cgroup probe: which hierarchies are mounted (mountinfo, fs.c) and the
 * cgroup version the plugin will use for the flags asked, with the refusals
 * that depend on it. prepare (lifecycle.c) decides with it.
 */
#include "internal.h"
#include "table.h"

#include <string.h>

/*
 * The cgroup version to use, and the refusals that depend on it. v1: the
 * plugin moves each task into a cgroup of its own in the devices (isolate)
 * and cpuset (cpus) hierarchies. Where one of them is co-mounted with a
 * controller Slurm finds the step's tasks by, that move would take the task
 * out of Slurm's cgroup there (signals, the end of the step, accounting
 * would miss it).
 */
static int choose_version(struct gb_cg_probe *p, unsigned flags, int version,
			  const char *mountinfo, char *err, size_t errlen)
{
	const struct gb_cg_mounts *mnt = &p->mnt;

	p->version = version;
	if (p->version == GB_CG_AUTO) {
		/* Use what Slurm's own cgroup/v1 would use when it is there. */
		if ((flags & GB_CG_ISOLATE) ? mnt->devices.found
					     : mnt->cpuset.found)
			p->version = GB_CG_V1;
		else
			p->version = GB_CG_V2;
	}
	if (p->version == GB_CG_V1 && (flags & GB_CG_ISOLATE) &&
	    !mnt->devices.found)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate: no cgroup v1 devices hierarchy in "
			       "%s", mountinfo);
	for (int i = 0; p->version == GB_CG_V1 && i < 2; i++) {
		const struct gb_cg_mount *m = i ? &mnt->cpuset : &mnt->devices;
		int flag = i ? GB_CG_CPUS : GB_CG_ISOLATE;

		if (!(flags & flag) || !m->found || !m->comount[0])
			continue;
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "%s: the cgroup v1 %s hierarchy at %s is "
			       "co-mounted with %s, by which Slurm finds the "
			       "step's tasks (proctrack/cgroup, "
			       "jobacct_gather/cgroup); moving a task into a "
			       "cgroup of gpubind's there would hide it from "
			       "Slurm. Mount %s on its own hierarchy",
			       i ? "cpus" : "isolate", i ? "cpuset" : "devices",
			       m->dir, m->comount, i ? "cpuset" : "devices");
	}
	if (p->version == GB_CG_V2 && !mnt->unified.found)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "cgroup: neither a cgroup v1 %s hierarchy nor "
			       "cgroup2 is mounted (%s)",
			       (flags & GB_CG_ISOLATE) ? "devices"
			       : "cpuset",
			       mountinfo);
	return GB_CG_OK;
}

int gb_cg_probe(struct gb_cg_probe *p, unsigned flags, int version,
		const char *mountinfo, char *err, size_t errlen)
{
	int rc;

	memset(p, 0, sizeof(*p));
	if (!mountinfo)
		mountinfo = "/proc/self/mountinfo";
	rc = gb_cg_parse_mountinfo(&p->mnt, mountinfo, err, errlen);
	if (rc)
		return rc;
	return choose_version(p, flags, version, mountinfo, err, errlen);
}
