/* benchtime.h: when did this process start, for the init benchmarks (bench/run.sh init|scaling).
 *
 * "From exec" is what the issue asks: the Go runtime of libgpuhelper starts when the library is
 * loaded, before main, so a clock started in main would miss it. bench/c/stamp reads
 * CLOCK_MONOTONIC and exec's the measured program with it in BENCH_T0_NS; everything after that
 * (execve, the dynamic loader, library constructors, main) is counted. Without BENCH_T0_NS the
 * start comes from /proc/self/stat field 22 (clock ticks since boot, 10 ms steps) against
 * CLOCK_BOOTTIME, which is too coarse for these figures but still honest.
 *
 * Output: one line per rank, "TIME <rank> <seconds from exec> <seconds from exec to main>
 * <ID prefix> <CPU seconds of the process so far, all threads, user+system>". */
#ifndef BENCHTIME_H
#define BENCHTIME_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline double bt_clock(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) {
        perror("gpubind: bench: clock_gettime");
        exit(2);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* bt_since_start returns seconds since the process was exec'd (see above), or exits. */
static inline double bt_since_start(void)
{
    const char *t0 = getenv("BENCH_T0_NS");
    if (t0 != NULL && *t0 != '\0') {
        char *end;
        errno = 0;
        long long ns = strtoll(t0, &end, 10);
        if (errno != 0 || *end != '\0' || ns <= 0) {
            fprintf(stderr, "gpubind: bench: BENCH_T0_NS=%s: expected nanoseconds of CLOCK_MONOTONIC\n", t0);
            exit(2);
        }
        return bt_clock(CLOCK_MONOTONIC) - (double)ns / 1e9;
    }
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL) {
        perror("gpubind: bench: /proc/self/stat");
        exit(2);
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command name, which ends at the last ')': state is field 3. */
    char *p = strrchr(buf, ')');
    unsigned long long start = 0;
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &start) != 1) {
        fprintf(stderr, "gpubind: bench: /proc/self/stat: cannot read field 22 (starttime)\n");
        exit(2);
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0) {
        fprintf(stderr, "gpubind: bench: sysconf(_SC_CLK_TCK) failed\n");
        exit(2);
    }
    return bt_clock(CLOCK_BOOTTIME) - (double)start / (double)hz;
}

static double bt_main_at; /* seconds from exec to main, set by bt_main() */

static inline void bt_main(void) { bt_main_at = bt_since_start(); }

/* bt_report prints this rank's line; the first 8 bytes of the ID let bench/run.sh check that
 * every rank got the same ID (a benchmark of a broken exchange would be worthless). */
static inline void bt_report(long rank, const void *id)
{
    double t = bt_since_start();
    const unsigned char *b = id;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        perror("gpubind: bench: getrusage");
        exit(2);
    }
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    printf("TIME %ld %.6f %.6f %02x%02x%02x%02x%02x%02x%02x%02x %.6f\n", rank, t, bt_main_at,
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], cpu);
    fflush(stdout);
}

#endif
