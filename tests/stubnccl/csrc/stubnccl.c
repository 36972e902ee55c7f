/* A stand-in libnccl.so.2 for CPU-only tests: only ncclGetUniqueId. Each call returns 128
 * random bytes and, when STUBNCCL_LOG names a file, appends "pid rank hex" to it (rank from the
 * launcher's variables, -1 if none), so tests can check which process made each ID.
 * STUBNCCL_FAIL=N makes it return N instead (a failing root). NCCL_COMM_ID=ADDR makes every ID
 * the same bytes (ADDR, zero-padded), as real NCCL does: it then puts that fixed address in the
 * ID instead of a fresh listener's. ncclGetVersion reports STUBNCCL_VERSION (default 21805,
 * NCCL 2.18.5). Build:
 *   cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o libnccl.so.2 stubnccl.c
 * With -DSTUB_RCCL it is a stand-in librccl.so.1 (RCCL: the same symbols, its own name) whose
 * random IDs begin with the 4 bytes "RCCL" (52 43 43 4c), so that a test can tell which library
 * made an ID, and whose ncclGetVersion defaults to 22203 (the NCCL version RCCL 2.22.3
 * follows):
 *   cc -DSTUB_RCCL -shared -fPIC -Wl,-soname,librccl.so.1 -o librccl.so.1 stubnccl.c */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ID_BYTES 128
#ifdef STUB_RCCL
#define STUB_VERSION 22203
#else
#define STUB_VERSION 21805
#endif

static const char *rank_env(void)
{
    const char *names[] = {"PMIX_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && *v != '\0')
            return v;
    }
    return "-1";
}

static int random_fill(unsigned char *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "gpubind: stubnccl: getrandom: %s\n", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

__attribute__((visibility("default"))) int ncclGetUniqueId(void *id)
{
    unsigned char buf[ID_BYTES];
    const char *fail = getenv("STUBNCCL_FAIL");
    if (fail != NULL && *fail != '\0')
        return atoi(fail);
    if (id == NULL)
        return 4; /* ncclInvalidArgument */
    const char *fixed = getenv("NCCL_COMM_ID");
    if (fixed != NULL && *fixed != '\0') {
        memset(buf, 0, sizeof(buf));
        strncpy((char *)buf, fixed, sizeof(buf) - 1);
    } else if (random_fill(buf, sizeof(buf)) != 0) {
        return 2; /* ncclSystemError */
    } else {
#ifdef STUB_RCCL
        memcpy(buf, "RCCL", 4);
#endif
    }
    memcpy(id, buf, sizeof(buf));
    const char *log = getenv("STUBNCCL_LOG");
    if (log != NULL && *log != '\0') {
        char line[64 + 2 * ID_BYTES];
        int off = snprintf(line, sizeof(line), "%ld %s ", (long)getpid(), rank_env());
        if (off < 0 || (size_t)off >= sizeof(line) - 2 * ID_BYTES - 2)
            return 2;
        for (size_t i = 0; i < ID_BYTES; i++)
            off += snprintf(line + off, sizeof(line) - (size_t)off, "%02x", buf[i]);
        line[off++] = '\n';
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "gpubind: stubnccl: open %s: %s\n", log, strerror(errno));
            return 2;
        }
        /* One write with O_APPEND: lines of concurrent processes do not interleave. */
        ssize_t w = write(fd, line, (size_t)off);
        int saved = errno;
        close(fd);
        if (w != off) {
            fprintf(stderr, "gpubind: stubnccl: write %s: %s\n", log, w < 0 ? strerror(saved) : "short write");
            return 2;
        }
    }
    return 0;
}

__attribute__((visibility("default"))) int ncclGetVersion(int *version)
{
    const char *v = getenv("STUBNCCL_VERSION");
    if (version == NULL)
        return 4; /* ncclInvalidArgument */
    *version = v != NULL && *v != '\0' ? atoi(v) : STUB_VERSION;
    return 0;
}
