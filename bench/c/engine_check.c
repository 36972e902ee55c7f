/* engine_check: what srun pays for --gpu-bind-topo on the client side (bench/run.sh stepd).
 * The front end (spank/frontend/local.c) dlopens the Go engine in srun/sbatch/salloc and calls
 * gpubind_engine_check on the option text; the Go runtime starts at that dlopen. This program
 * does the same in a fresh process and prints "CHECK <dlopen ms> <first check call ms>".
 * Usage: engine_check ENGINE.so OPTION */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*check_fn)(const char *option, char *errbuf, int errlen);

static double now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("gpubind: engine_check: clock_gettime");
        exit(2);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    char msg[1024] = "";
    if (argc != 3) {
        fprintf(stderr, "gpubind: engine_check: usage: engine_check ENGINE.so OPTION\n");
        return 2;
    }
    double t0 = now();
    void *h = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "gpubind: engine_check: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    double t1 = now();
    check_fn check = (check_fn)dlsym(h, "gpubind_engine_check");
    if (check == NULL) {
        fprintf(stderr, "gpubind: engine_check: %s has no gpubind_engine_check: %s\n", argv[1], dlerror());
        return 1;
    }
    int rc = check(argv[2], msg, (int)sizeof(msg));
    double t2 = now();
    if (rc != 0) {
        fprintf(stderr, "gpubind: engine_check: option %s rejected: %s\n", argv[2], msg);
        return 1;
    }
    printf("CHECK %.3f %.3f\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    return 0;
}
