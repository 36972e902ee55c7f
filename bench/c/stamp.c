/* stamp: read CLOCK_MONOTONIC, put it into BENCH_T0_NS and exec the program named by the
 * arguments (see benchtime.h). Usage: stamp PROGRAM [ARGS...] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    struct timespec ts;
    char buf[32];
    if (argc < 2) {
        fprintf(stderr, "gpubind: stamp: usage: stamp PROGRAM [ARGS...]\n");
        return 2;
    }
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("gpubind: stamp: clock_gettime");
        return 2;
    }
    snprintf(buf, sizeof(buf), "%lld", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (setenv("BENCH_T0_NS", buf, 1) != 0) {
        perror("gpubind: stamp: setenv");
        return 2;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "gpubind: stamp: exec %s: ", argv[1]);
    perror(NULL);
    return 127;
}
