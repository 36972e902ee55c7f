/*
 * bpf(2) for the cgroup v2 backend: load a program, make and fill its maps,
 * attach, detach and query device programs on a cgroup. No policy here: what
 * to attach where is v2.c's, and the program itself comes from
 * v2_prog.c. Plain C on purpose: this runs inside slurmstepd and the
 * clone(CLONE_VM) children of contain_spank, where no Go runtime may live
 * (docs/admin.md, "Why two libraries").
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static char verifier_log[16384];

/* The verifier's last line, or "" when it wrote none. */
static const char *verifier_last_line(void)
{
	size_t l = strlen(verifier_log);
	const char *last;

	while (l && verifier_log[l - 1] == '\n')
		verifier_log[--l] = '\0';
	last = strrchr(verifier_log, '\n');
	return last ? last + 1 : verifier_log;
}

int gb_bpf_prog_load(const struct gb_devprog *p, const char *name, char *err,
		     size_t errlen)
{
	union bpf_attr a;
	int fd, e;

	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	a.insns = (unsigned long)p->insn;
	a.insn_cnt = p->n;
	a.license = (unsigned long)"Dual MIT/GPL";
	snprintf(a.prog_name, sizeof(a.prog_name), "%s", name);
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd >= 0)
		return fd;
	/* Load again with the verifier's log, to say why. */
	verifier_log[0] = '\0';
	a.log_level = 1;
	a.log_buf = (unsigned long)verifier_log;
	a.log_size = sizeof(verifier_log);
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd >= 0)
		return fd;
	e = errno;
	{
		const char *last = verifier_last_line();

		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: loading BPF device program %s: %s%s%s",
			       name, strerror(e), *verifier_log ? "; verifier: " : "",
			       last);
	}
}

int gb_bpf_map_create(enum bpf_map_type type, unsigned entries,
		      const char *name, char *err, size_t errlen)
{
	union bpf_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.map_type = type;
	a.key_size = 4;
	a.value_size = 4;
	a.max_entries = entries;
	snprintf(a.map_name, sizeof(a.map_name), "%s", name);
	fd = (int)sys_bpf(BPF_MAP_CREATE, &a);
	if (fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: creating BPF map %s: %s", name,
			       strerror(errno));
	return fd;
}

int gb_bpf_map_update(int map_fd, uint32_t key, uint32_t value)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map_fd;
	a.key = (unsigned long)&key;
	a.value = (unsigned long)&value;
	a.flags = BPF_ANY;
	return (int)sys_bpf(BPF_MAP_UPDATE_ELEM, &a);
}

int gb_bpf_map_freeze(int map_fd)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map_fd;
	if (sys_bpf(BPF_MAP_FREEZE, &a) == 0)
		return 0;
	/* Older kernels (< 5.2) or map types without freeze: not fatal. */
	return (errno == EINVAL || errno == EOPNOTSUPP || errno == 524) ? 0
									 : -1;
}

int gb_bpf_prog_fd_by_id(uint32_t id)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.prog_id = id;
	return (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a);
}

int gb_bpf_attach(int cg_fd, int prog_fd, unsigned flags)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)cg_fd;
	a.attach_bpf_fd = (uint32_t)prog_fd;
	a.attach_type = BPF_CGROUP_DEVICE;
	a.attach_flags = flags;
	return (int)sys_bpf(BPF_PROG_ATTACH, &a);
}

int gb_bpf_detach(int cg_fd, int prog_fd)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)cg_fd;
	a.attach_bpf_fd = (uint32_t)prog_fd;
	a.attach_type = BPF_CGROUP_DEVICE;
	return (int)sys_bpf(BPF_PROG_DETACH, &a);
}

int gb_bpf_query(const char *dir, int effective, uint32_t *ids,
		 uint32_t *cnt, uint32_t *flags, char *err, size_t errlen)
{
	union bpf_attr a;
	int fd, e;
	long rc;

	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s", dir,
			       strerror(errno));
	memset(&a, 0, sizeof(a));
	a.query.target_fd = (uint32_t)fd;
	a.query.attach_type = BPF_CGROUP_DEVICE;
	a.query.query_flags = effective ? BPF_F_QUERY_EFFECTIVE : 0;
	a.query.prog_ids = (unsigned long)ids;
	a.query.prog_cnt = GB_BPF_MAX_QUERY;
	rc = sys_bpf(BPF_PROG_QUERY, &a);
	e = errno;
	close(fd);
	if (rc < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: BPF_PROG_QUERY on %s: %s%s", dir,
			       strerror(e),
			       e == ENOSPC ? " (more than 64 programs)" : "");
	*cnt = a.query.prog_cnt;
	if (flags)
		*flags = a.query.attach_flags;
	return GB_CG_OK;
}
