/*
 * cgroup_gpu: what a process can see of the GPUs from where it runs.
 * Used by tests/gpu/cgroup_gpu.sh inside cgroups made by the plugin's own
 * cgroup code. Needs no CUDA headers: NVML and CUDA are dlopen'ed.
 *
 *   cgroup_gpu DEVNODE
 *
 * Prints one line per check and a last line "verdict nvml=yes|no cuda=yes|no"
 * (yes: the API initialised and reported at least one GPU).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*nvml_init_t)(void);
typedef int (*nvml_count_t)(unsigned int *);
typedef const char *(*nvml_str_t)(int);
typedef int (*cu_init_t)(unsigned int);
typedef int (*cu_count_t)(int *);
typedef int (*cu_name_t)(int, const char **);
typedef int (*cudart_count_t)(int *);
typedef const char *(*cudart_str_t)(int);

static void *open_first(const char *const *names, const char *what)
{
	for (int i = 0; names[i]; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h) {
			printf("%s: loaded %s\n", what, names[i]);
			return h;
		}
	}
	printf("%s: not found (%s)\n", what, dlerror());
	return NULL;
}

static int check_nvml(void)
{
	static const char *const names[] = {"libnvidia-ml.so.1", "libnvidia-ml.so", NULL};
	void *h = open_first(names, "nvml");
	nvml_init_t init;
	nvml_count_t count;
	nvml_str_t str;
	unsigned int n = 0;
	int rc;

	if (!h)
		return 0;
	init = (nvml_init_t)dlsym(h, "nvmlInit_v2");
	count = (nvml_count_t)dlsym(h, "nvmlDeviceGetCount_v2");
	str = (nvml_str_t)dlsym(h, "nvmlErrorString");
	if (!init || !count || !str) {
		printf("nvml: missing symbols in libnvidia-ml\n");
		return 0;
	}
	rc = init();
	printf("nvmlInit_v2: %d (%s)\n", rc, str(rc));
	if (rc != 0)
		return 0;
	rc = count(&n);
	printf("nvmlDeviceGetCount_v2: %d (%s) count=%u\n", rc, str(rc), n);
	return rc == 0 && n > 0;
}

static int check_cuda(void)
{
	static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
	void *h = open_first(names, "cuda driver");
	cu_init_t init;
	cu_count_t count;
	cu_name_t name;
	const char *s = "?";
	int n = 0, rc;

	if (!h)
		return 0;
	init = (cu_init_t)dlsym(h, "cuInit");
	count = (cu_count_t)dlsym(h, "cuDeviceGetCount");
	name = (cu_name_t)dlsym(h, "cuGetErrorName");
	if (!init || !count || !name) {
		printf("cuda driver: missing symbols in libcuda\n");
		return 0;
	}
	rc = init(0);
	name(rc, &s);
	printf("cuInit: %d (%s)\n", rc, s ? s : "?");
	if (rc != 0)
		return 0;
	rc = count(&n);
	name(rc, &s);
	printf("cuDeviceGetCount: %d (%s) count=%d\n", rc, s ? s : "?", n);
	return rc == 0 && n > 0;
}

/* The runtime API too, when a libcudart is around (informational). */
static void check_cudart(void)
{
	static const char *const names[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"/usr/local/cuda/lib64/libcudart.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so", NULL};
	void *h = open_first(names, "cuda runtime");
	cudart_count_t count;
	cudart_str_t str;
	int n = 0, rc;

	if (!h)
		return;
	count = (cudart_count_t)dlsym(h, "cudaGetDeviceCount");
	str = (cudart_str_t)dlsym(h, "cudaGetErrorString");
	if (!count || !str) {
		printf("cuda runtime: missing symbols in libcudart\n");
		return;
	}
	rc = count(&n);
	printf("cudaGetDeviceCount: %d (%s) count=%d\n", rc, str(rc), n);
}

int main(int argc, char **argv)
{
	int fd, nvml, cuda;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "gpubind: usage: cgroup_gpu /dev/nvidiaN\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		printf("open %s: OK\n", argv[1]);
		close(fd);
	} else {
		printf("open %s: %s (%s)\n", argv[1],
		       errno == EPERM ? "EPERM" : "error", strerror(errno));
	}
	nvml = check_nvml();
	cuda = check_cuda();
	check_cudart();
	printf("verdict nvml=%s cuda=%s\n", nvml ? "yes" : "no",
	       cuda ? "yes" : "no");
	return 0;
}
