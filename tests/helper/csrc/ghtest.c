/* ghtest: drives libgpuhelper for tests/helper (the Go tests one directory up). One mode per run:
 *   info NIDS   init, then scalable IDs (NIDS, 0 = gpuhelper_scalable_count), a node group and a
 *               color group (color = rank % 3); prints one parseable line per fact
 *   die0        rank 0 exits at once; the others must fail with GPUHELPER_ETIMEOUT
 *   late0 SECS  rank 0 sleeps SECS before init; the others must time out, rank 0 succeeds
 *   twice       init twice in a row: same answer
 *   threads     two threads call init at the same time: same answer
 *   fork        fork before and after init: the children get GPUHELPER_EFORK
 *   expect CODE init must return CODE (a number); prints the message
 *   userfn      gpuhelper_set_nccl_get_unique_id with a function of this program
 *   badargs     argument checks
 *   noid        (1.1) no NCCL on rank 0: init succeeds without the ID, gpuhelper_nccl_id,
 *               scalable and group IDs fail with GPUHELPER_ENCCL; prints the reason
 *   lateid      (1.1) no NCCL at init; then gpuhelper_set_nccl_get_unique_id and gpuhelper_nccl_id
 *               create the world ID
 *   commid      (run with NCCL_COMM_ID set) init gets the world ID; scalable and group IDs are
 *               refused with GPUHELPER_ENCCL and a message naming NCCL_COMM_ID
 *   lazyid      (1.1, with GPUHELPER_NCCL_ID=lazy and STUBNCCL_LOG) init makes no ID (rank 0's
 *               stub log stays empty); gpuhelper_nccl_id makes it; prints pid and ID
 *   origin      (1.1) gpuhelper_nccl_origin: prints rank 0's NCCL version and library
 *   vers        init; OK with "same" on success, OK with the message on GPUHELPER_ENCCL (an NCCL
 *               version mismatch); a failing finalize is fine (the others have left)
 *   dlscope     init, then ncclGetUniqueId and PMIx_Init (of the libraries it dlopened) must not
 *               be visible process-wide (dlsym RTLD_DEFAULT)
 *   reinit CODE init, finalize, init again: the second init must return CODE
 *   coll        (1.1) barrier, bcast from the last rank, allgather, and their bad inputs
 *   abort R     (1.1) rank R calls gpuhelper_abort(7, ...); the others wait in a barrier, then
 *               sleep 100 s: only the launcher's kill ends them in time (the code is
 *               $GHTEST_ABORT_CODE when set, e.g. 256)
 *   clique      (1.3) init, then gpuhelper_nvl_cliques; prints "CLIQUE rank count nvl_clique"
 *               (nvl_clique "-" when empty)
 *   abortininit (1.3) rank 0 sleeps 100 s without init; the others start init (which waits for
 *               rank 0's ID) and, from another thread a second later, gpuhelper_abort(7, ...)
 *   abortwait   (1.1) rank 0: a thread waits in a barrier the others never enter, and the main
 *               thread calls gpuhelper_abort(7, ...) meanwhile; the others sleep 100 s
 *   bigstruct   init with this header's struct writes nothing past it; built against the current
 *               header, also init and group_id with larger structs (a newer caller): the
 *               library fills what it knows and leaves the rest alone
 *   gpu         init, print "GPU rank rc cuda_device gpu_uuid pci_bus_id CUDA_VISIBLE_DEVICES | message"
 *               whatever init returned, then gpuhelper_finalize (also after a failed init) and
 *               "FIN rank rc seconds"
 * With GHTEST_PRELOAD=PATH set, every mode first dlopens PATH with RTLD_LOCAL, as Python and
 * PyTorch load NCCL/RCCL: loaded, but invisible to dlsym(RTLD_DEFAULT).
 * Lines start with a tag (INFO, SCAL, NODE, COLOR, TIME, OK, FAIL) and the rank. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gpuhelper.h>

static void hex(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int env_rank(void)
{
    const char *names[] = {"PMIX_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && *v != '\0')
            return atoi(v);
    }
    return 0;
}

static int fail(const char *what, int rc)
{
    printf("FAIL %d %s: rc %d %s | %s\n", env_rank(), what, rc, gpuhelper_strerror(rc), gpuhelper_last_error());
    fflush(stdout);
    return 1;
}

static int init(gpuhelper_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    double t0 = now();
    int rc = gpuhelper_init(info);
    double t1 = now();
    if (rc == 0)
        printf("TIME %d %.6f\n", info->rank, t1 - t0);
    return rc;
}

/* finalize: launchers (mpirun) treat a process that initialised PMIx and exits without
 * finalizing as failed. */
static int finalize(void)
{
    int rc = gpuhelper_finalize();
    return rc == 0 ? 0 : fail("gpuhelper_finalize", rc);
}

static int mode_info(int nids)
{
    gpuhelper_info_t info;
    char h[2 * 128 * 64 + 64];
    char host[256] = "";
    int rc = init(&info);
    if (rc != 0)
        return fail("gpuhelper_init", rc);
    if (gethostname(host, sizeof(host) - 1) != 0)
        strcpy(host, "?");
    hex(info.nccl_id, sizeof(info.nccl_id), h);
    printf("INFO %d %d %d %d %d %d %ld %d %s %s %s %s\n", info.rank, info.size, info.local_rank,
           info.local_size, info.node_id, info.num_nodes, (long)getpid(), info.cuda_device,
           info.pci_bus_id[0] ? info.pci_bus_id : "-", info.gpu_uuid[0] ? info.gpu_uuid : "-", host, h);

    const char *order = getenv("CUDA_DEVICE_ORDER");
    printf("ORDER %d %s\n", info.rank, order ? order : "(unset)");
#if GPUHELPER_VERSION_MINOR >= 1
    {
        unsigned char id[GPUHELPER_NCCL_ID_BYTES];
        if (!(info.flags & GPUHELPER_INFO_NCCL_ID))
            return fail("init: flags lack GPUHELPER_INFO_NCCL_ID", GPUHELPER_EINTERNAL);
        if ((rc = gpuhelper_nccl_id(id)) != 0)
            return fail("gpuhelper_nccl_id", rc);
        if (memcmp(id, info.nccl_id, sizeof(id)) != 0)
            return fail("gpuhelper_nccl_id differs from info.nccl_id", GPUHELPER_EINTERNAL);
    }
#endif

    if (nids == 0) {
        nids = gpuhelper_scalable_count();
        if (nids < 0)
            return fail("gpuhelper_scalable_count", nids);
    }
    if (nids > 64)
        return fail("nids > 64 in this test program", GPUHELPER_EINVAL);
    unsigned char *ids = calloc((size_t)nids, GPUHELPER_NCCL_ID_BYTES);
    if (ids == NULL)
        return fail("calloc", GPUHELPER_EINTERNAL);
    rc = gpuhelper_scalable_ids(nids, ids, (size_t)nids * GPUHELPER_NCCL_ID_BYTES);
    if (rc != 0)
        return fail("gpuhelper_scalable_ids", rc);
    printf("SCAL %d %d", info.rank, nids);
    for (int i = 0; i < nids; i++) {
        hex(ids + (size_t)i * GPUHELPER_NCCL_ID_BYTES, GPUHELPER_NCCL_ID_BYTES, h);
        printf(" %s", h);
    }
    printf("\n");
    free(ids);

    gpuhelper_group_t g = {.struct_size = sizeof(g)};
    rc = gpuhelper_group_id(GPUHELPER_COLOR_NODE, &g);
    if (rc != 0)
        return fail("gpuhelper_group_id(node)", rc);
    hex(g.nccl_id, sizeof(g.nccl_id), h);
    printf("NODE %d %d %d %d %s\n", info.rank, g.rank, g.size, g.root, h);

    gpuhelper_group_t c = {.struct_size = sizeof(c)};
    rc = gpuhelper_group_id(info.rank % 3, &c);
    if (rc != 0)
        return fail("gpuhelper_group_id(color)", rc);
    hex(c.nccl_id, sizeof(c.nccl_id), h);
    printf("COLOR %d %d %d %d %d %s\n", info.rank, c.color, c.rank, c.size, c.root, h);
    fflush(stdout);
    rc = gpuhelper_finalize();
    if (rc != 0)
        return fail("gpuhelper_finalize", rc);
    return 0;
}

static int mode_expect(int want)
{
    gpuhelper_info_t info;
    int rc = init(&info);
    printf("%s %d rc %d %s | %s\n", rc == want ? "OK" : "FAIL", env_rank(), rc, gpuhelper_strerror(rc),
           gpuhelper_last_error());
    if (rc == 0 && finalize() != 0)
        return 1;
    return rc == want ? 0 : 1;
}

static int mode_die0(void)
{
    if (env_rank() == 0)
        _exit(0); /* never publishes the ID */
    return mode_expect(GPUHELPER_ETIMEOUT);
}

static int mode_late0(int secs)
{
    if (env_rank() == 0) {
        /* Rank 0 publishes long after the others gave up; its init still succeeds, and its
         * finalize may time out waiting for ranks that have left. */
        gpuhelper_info_t info;
        sleep((unsigned)secs);
        int rc = init(&info);
        if (rc != 0)
            return fail("late init", rc);
        rc = gpuhelper_finalize();
        if (rc != 0 && rc != GPUHELPER_ETIMEOUT)
            return fail("late finalize", rc);
        printf("OK 0 late0\n");
        return 0;
    }
    return mode_expect(GPUHELPER_ETIMEOUT);
}

static int same(const gpuhelper_info_t *a, const gpuhelper_info_t *b)
{
    return a->rank == b->rank && a->size == b->size && a->local_rank == b->local_rank &&
           a->cuda_device == b->cuda_device && strcmp(a->pci_bus_id, b->pci_bus_id) == 0 &&
           memcmp(a->nccl_id, b->nccl_id, sizeof(a->nccl_id)) == 0;
}

static int mode_twice(void)
{
    gpuhelper_info_t a, b;
    int rc = init(&a);
    if (rc != 0)
        return fail("first init", rc);
    rc = init(&b);
    if (rc != 0)
        return fail("second init", rc);
    if (!same(&a, &b))
        return fail("second init gave a different answer", GPUHELPER_EINTERNAL);
    printf("OK %d twice\n", a.rank);
    return finalize();
}

struct thr {
    gpuhelper_info_t info;
    int rc;
};

static void *thread_init(void *arg)
{
    struct thr *t = arg;
    t->rc = init(&t->info);
    return NULL;
}

static int mode_threads(void)
{
    struct thr t[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, thread_init, &t[i]) != 0)
            return fail("pthread_create", GPUHELPER_EINTERNAL);
    for (int i = 0; i < 2; i++)
        if (pthread_join(th[i], NULL) != 0)
            return fail("pthread_join", GPUHELPER_EINTERNAL);
    if (t[0].rc != 0 || t[1].rc != 0)
        return fail("init in a thread", t[0].rc ? t[0].rc : t[1].rc);
    if (!same(&t[0].info, &t[1].info))
        return fail("threads got different answers", GPUHELPER_EINTERNAL);
    printf("OK %d threads\n", t[0].info.rank);
    return finalize();
}

/* child_check runs in a forked child: every export must refuse (or, for the plain-C ones,
 * answer) without entering Go. The parent's alarm catches a hang. */
static int fork_check(const char *when)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return fail("fork", GPUHELPER_EINTERNAL);
    if (pid == 0) {
        alarm(20);
        gpuhelper_info_t info = {.struct_size = sizeof(info)};
        gpuhelper_group_t g = {.struct_size = sizeof(g)};
        unsigned char id[GPUHELPER_NCCL_ID_BYTES];
        int ok = gpuhelper_init(&info) == GPUHELPER_EFORK && gpuhelper_finalize() == GPUHELPER_EFORK &&
                 gpuhelper_scalable_count() == GPUHELPER_EFORK &&
                 gpuhelper_scalable_ids(1, id, sizeof(id)) == GPUHELPER_EFORK &&
                 gpuhelper_group_id(0, &g) == GPUHELPER_EFORK &&
                 gpuhelper_set_nccl_get_unique_id(NULL) == GPUHELPER_EFORK &&
                 strstr(gpuhelper_strerror(GPUHELPER_EFORK), "GPUHELPER_EFORK") != NULL &&
                 strstr(gpuhelper_last_error(), "fork") != NULL && strcmp(gpuhelper_version(), "") != 0;
#if GPUHELPER_VERSION_MINOR >= 1
        ok = ok && gpuhelper_nccl_id(id) == GPUHELPER_EFORK && gpuhelper_barrier() == GPUHELPER_EFORK &&
             gpuhelper_bcast(0, id, 1) == GPUHELPER_EFORK && gpuhelper_allgather(id, 1, id, 1) == GPUHELPER_EFORK &&
             gpuhelper_nccl_origin(NULL, NULL, 0) == GPUHELPER_EFORK;
#endif
        printf("%s %d fork-%s child: %s\n", ok ? "OK" : "FAIL", env_rank(), when, gpuhelper_last_error());
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return fail("waitpid", GPUHELPER_EINTERNAL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fail("forked child", GPUHELPER_EFORK);
    return 0;
}

static int mode_fork(void)
{
    gpuhelper_info_t info;
    if (fork_check("before-init") != 0)
        return 1;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if (fork_check("after-init") != 0)
        return 1;
    /* The parent still works. */
    rc = init(&info);
    if (rc != 0)
        return fail("init after fork", rc);
    printf("OK %d fork\n", info.rank);
    return finalize();
}

static int user_fn(void *id)
{
    memset(id, 0xab, GPUHELPER_NCCL_ID_BYTES);
    return 0;
}

static int mode_userfn(void)
{
    gpuhelper_info_t info;
    int rc = gpuhelper_set_nccl_get_unique_id(user_fn);
    if (rc != 0)
        return fail("set_nccl_get_unique_id", rc);
    rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    for (int i = 0; i < GPUHELPER_NCCL_ID_BYTES; i++)
        if (info.nccl_id[i] != 0xab)
            return fail("ID not from the user function", GPUHELPER_EINTERNAL);
    printf("OK %d userfn\n", info.rank);
    return finalize();
}

static int mode_badargs(void)
{
    gpuhelper_info_t info;
    unsigned char id[GPUHELPER_NCCL_ID_BYTES];
    gpuhelper_group_t g = {.struct_size = sizeof(g)};
    int rc;
    if ((rc = gpuhelper_scalable_count()) != GPUHELPER_ENOTINIT)
        return fail("scalable_count before init", rc);
    if ((rc = gpuhelper_init(NULL)) != GPUHELPER_EINVAL)
        return fail("init(NULL)", rc);
    memset(&info, 0, sizeof(info));
    info.struct_size = offsetof(gpuhelper_info_t, nccl_id); /* below the 1.0 size */
    if ((rc = gpuhelper_init(&info)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "struct_size") == NULL)
        return fail("init with a small struct_size", rc);
    if ((rc = init(&info)) != 0)
        return fail("init", rc);
    if ((rc = gpuhelper_scalable_ids(2, id, sizeof(id))) != GPUHELPER_EINVAL)
        return fail("scalable_ids: 2 IDs in a job of 1 / short buffer", rc);
    if ((rc = gpuhelper_scalable_ids(1, id, sizeof(id) - 1)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "ids_bytes") == NULL)
        return fail("scalable_ids: short buffer", rc);
    if ((rc = gpuhelper_group_id(-7, &g)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "color -7") == NULL)
        return fail("group_id(-7)", rc);
    g.struct_size = 0;
    if ((rc = gpuhelper_group_id(0, &g)) != GPUHELPER_EINVAL)
        return fail("group_id with struct_size 0", rc);
    if ((rc = gpuhelper_finalize()) != 0 || (rc = gpuhelper_finalize()) != 0)
        return fail("finalize twice", rc);
    if ((rc = gpuhelper_scalable_ids(1, id, sizeof(id))) != GPUHELPER_ENOTINIT)
        return fail("scalable_ids after finalize", rc);
    if (strcmp(gpuhelper_strerror(12345), "GPUHELPER_E?: unknown error code") != 0)
        return fail("strerror(12345)", GPUHELPER_EINTERNAL);
    printf("OK %d badargs version %s header %d.%d.%d\n", info.rank, gpuhelper_version(), GPUHELPER_VERSION_MAJOR,
           GPUHELPER_VERSION_MINOR, GPUHELPER_VERSION_PATCH);
    return 0;
}

#if GPUHELPER_VERSION_MINOR >= 1
static int zero(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

static int mode_noid(void)
{
    gpuhelper_info_t info;
    unsigned char id[GPUHELPER_NCCL_ID_BYTES];
    char why[1024];
    gpuhelper_group_t g = {.struct_size = sizeof(g)};
    int rc = init(&info);
    if (rc != 0)
        return fail("init without NCCL", rc);
    if ((info.flags & GPUHELPER_INFO_NCCL_ID) || !zero(info.nccl_id, sizeof(info.nccl_id)))
        return fail("init without NCCL: flags say there is an ID, or nccl_id is not zero", GPUHELPER_EINTERNAL);
    if (info.size < 1 || info.rank < 0 || info.rank >= info.size || info.local_size < 1 || info.num_nodes < 1)
        return fail("init without NCCL: bad rank facts", GPUHELPER_EINTERNAL);
    if ((rc = gpuhelper_nccl_id(NULL)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "id is NULL") == NULL)
        return fail("gpuhelper_nccl_id(NULL)", rc);
    memset(id, 0x77, sizeof(id));
    if ((rc = gpuhelper_nccl_id(id)) != GPUHELPER_ENCCL)
        return fail("gpuhelper_nccl_id without NCCL", rc);
    snprintf(why, sizeof(why), "%s", gpuhelper_last_error());
    if ((rc = gpuhelper_scalable_ids(1, id, sizeof(id))) != GPUHELPER_ENCCL)
        return fail("gpuhelper_scalable_ids without NCCL", rc);
    if ((rc = gpuhelper_group_id(GPUHELPER_COLOR_NODE, &g)) != GPUHELPER_ENCCL)
        return fail("gpuhelper_group_id without NCCL", rc);
    printf("OK %d noid rank %d/%d local %d/%d node %d/%d | %s\n", info.rank, info.rank, info.size, info.local_rank,
           info.local_size, info.node_id, info.num_nodes, why);
    return finalize();
}

static int mode_lazyid(void)
{
    gpuhelper_info_t info;
    unsigned char id[GPUHELPER_NCCL_ID_BYTES];
    char h[2 * GPUHELPER_NCCL_ID_BYTES + 1];
    const char *log = getenv("STUBNCCL_LOG");
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if (info.flags & GPUHELPER_INFO_NCCL_ID)
        return fail("init made the ID under GPUHELPER_NCCL_ID=lazy", GPUHELPER_EINTERNAL);
    if (info.rank == 0 && log != NULL && access(log, F_OK) == 0)
        return fail("ncclGetUniqueId was called during init (the stub log exists)", GPUHELPER_EINTERNAL);
    if ((rc = gpuhelper_nccl_id(id)) != 0)
        return fail("gpuhelper_nccl_id", rc);
    hex(id, sizeof(id), h);
    printf("OK %d lazyid %ld %s\n", info.rank, (long)getpid(), h);
    return finalize();
}

static int mode_lateid(void)
{
    gpuhelper_info_t info;
    unsigned char id[GPUHELPER_NCCL_ID_BYTES];
    int rc = init(&info);
    if (rc != 0)
        return fail("init without NCCL", rc);
    if (info.flags & GPUHELPER_INFO_NCCL_ID)
        return fail("init made an ID without NCCL", GPUHELPER_EINTERNAL);
    if ((rc = gpuhelper_set_nccl_get_unique_id(user_fn)) != 0)
        return fail("set_nccl_get_unique_id", rc);
    if ((rc = gpuhelper_nccl_id(id)) != 0)
        return fail("gpuhelper_nccl_id once NCCL is there", rc);
    for (size_t i = 0; i < sizeof(id); i++)
        if (id[i] != 0xab)
            return fail("gpuhelper_nccl_id: ID not from the user function", GPUHELPER_EINTERNAL);
    memset(id, 0, sizeof(id));
    if ((rc = gpuhelper_nccl_id(id)) != 0 || id[0] != 0xab) /* now a local copy */
        return fail("second gpuhelper_nccl_id", rc);
    printf("OK %d lateid\n", info.rank);
    return finalize();
}
#endif

static int mode_commid(void)
{
    gpuhelper_info_t info;
    unsigned char ids[2 * GPUHELPER_NCCL_ID_BYTES];
    gpuhelper_group_t g = {.struct_size = sizeof(g)};
    char why[2][1024];
    int rc = init(&info);
    if (rc != 0)
        return fail("init with NCCL_COMM_ID", rc);
    int n = info.size > 1 ? 2 : 1;
    if ((rc = gpuhelper_scalable_ids(n, ids, sizeof(ids))) != GPUHELPER_ENCCL ||
        strstr(gpuhelper_last_error(), "NCCL_COMM_ID") == NULL)
        return fail("scalable_ids with NCCL_COMM_ID", rc);
    snprintf(why[0], sizeof(why[0]), "%s", gpuhelper_last_error());
    if ((rc = gpuhelper_group_id(info.rank % 2, &g)) != GPUHELPER_ENCCL ||
        strstr(gpuhelper_last_error(), "NCCL_COMM_ID") == NULL)
        return fail("group_id with NCCL_COMM_ID", rc);
    snprintf(why[1], sizeof(why[1]), "%s", gpuhelper_last_error());
    printf("OK %d commid | %s | %s\n", info.rank, why[0], why[1]);
    return finalize();
}

#if GPUHELPER_VERSION_MINOR >= 1
static int mode_origin(void)
{
    gpuhelper_info_t info;
    char lib[4096], tiny[2];
    int v = -1, rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if ((rc = gpuhelper_nccl_origin(&v, lib, sizeof(lib))) != 0)
        return fail("gpuhelper_nccl_origin", rc);
    if (lib[0] != '\0' && ((rc = gpuhelper_nccl_origin(NULL, tiny, sizeof(tiny))) != GPUHELPER_EINVAL ||
                           strstr(gpuhelper_last_error(), "library_bytes 2") == NULL))
        return fail("gpuhelper_nccl_origin with a 2-byte buffer", rc);
    printf("OK %d origin %d %s\n", info.rank, v, lib[0] ? lib : "-");
    return finalize();
}
#endif

static int mode_vers(void)
{
    gpuhelper_info_t info;
    int rc = init(&info);
    if (rc == GPUHELPER_ENCCL) {
        printf("OK %d vers | %s\n", env_rank(), gpuhelper_last_error());
        return 0;
    }
    if (rc != 0)
        return fail("init", rc);
    printf("OK %d vers same\n", info.rank);
    /* The ranks that refused the ID have left: the finalize barrier may time out, or the
     * server may answer that the others are gone (Open MPI: PARTIAL SUCCESS, GPUHELPER_EPMIX). */
    rc = gpuhelper_finalize();
    return rc == 0 || rc == GPUHELPER_ETIMEOUT || rc == GPUHELPER_EPMIX ? 0 : fail("finalize", rc);
}

static int mode_dlscope(void)
{
    gpuhelper_info_t info;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if (dlsym(RTLD_DEFAULT, "ncclGetUniqueId") != NULL)
        return fail("the library's dlopen of NCCL made ncclGetUniqueId visible process-wide", GPUHELPER_EINTERNAL);
    /* Issue 26: libpmix was dlopen'ed RTLD_GLOBAL, so an MPI with its own PMIx, loaded later,
     * could bind to ours. (This program does not link libpmix itself.) */
    if (dlsym(RTLD_DEFAULT, "PMIx_Init") != NULL)
        return fail("the library's dlopen of libpmix made PMIx_Init visible process-wide", GPUHELPER_EINTERNAL);
    printf("OK %d dlscope\n", info.rank);
    return finalize();
}

static int mode_reinit(int want)
{
    gpuhelper_info_t info;
    int rc = init(&info);
    if (rc != 0)
        return fail("first init", rc);
    if ((rc = gpuhelper_finalize()) != 0)
        return fail("finalize", rc);
    rc = init(&info);
    printf("%s %d reinit rc %d %s | %s\n", rc == want ? "OK" : "FAIL", env_rank(), rc, gpuhelper_strerror(rc),
           gpuhelper_last_error());
    if (rc == 0 && finalize() != 0)
        return 1;
    return rc == want ? 0 : 1;
}

#if GPUHELPER_VERSION_MINOR >= 1
static unsigned char pattern(int rank, size_t i) { return (unsigned char)(rank * 31 + (int)i * 7 + 1); }

static int mode_coll(void)
{
    gpuhelper_info_t info;
    unsigned char b[300], one[16], *all;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    int n = info.size, me = info.rank, root = n - 1;
    if ((rc = gpuhelper_barrier()) != 0)
        return fail("barrier", rc);
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = me == root ? pattern(root, i) : 0;
    if ((rc = gpuhelper_bcast(root, b, sizeof(b))) != 0)
        return fail("bcast", rc);
    for (size_t i = 0; i < sizeof(b); i++)
        if (b[i] != pattern(root, i))
            return fail("bcast: wrong bytes", GPUHELPER_EINTERNAL);
    all = malloc((size_t)n * sizeof(one));
    if (all == NULL)
        return fail("malloc", GPUHELPER_EINTERNAL);
    for (size_t i = 0; i < sizeof(one); i++)
        one[i] = pattern(me, i);
    if ((rc = gpuhelper_allgather(one, sizeof(one), all, (size_t)n * sizeof(one))) != 0)
        return fail("allgather", rc);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < sizeof(one); i++)
            if (all[(size_t)r * sizeof(one) + i] != pattern(r, i))
                return fail("allgather: wrong bytes", GPUHELPER_EINTERNAL);
    /* Bad input, the same on every rank, so that no rank waits for another. */
    if ((rc = gpuhelper_bcast(n, b, 1)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "root") == NULL)
        return fail("bcast with root = size", rc);
    if ((rc = gpuhelper_allgather(one, sizeof(one), all, (size_t)n * sizeof(one) - 1)) != GPUHELPER_EINVAL ||
        strstr(gpuhelper_last_error(), "out_bytes") == NULL)
        return fail("allgather with a short out", rc);
    if ((rc = gpuhelper_bcast(0, NULL, 4)) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "buf is NULL") == NULL)
        return fail("bcast of NULL", rc);
    if ((rc = gpuhelper_abort(0, "no")) != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "code 0") == NULL)
        return fail("abort(0)", rc);
    /* A length mismatch: rank 0 broadcasts 4 bytes, the others expect 5. */
    rc = gpuhelper_bcast(0, b, me == 0 ? 4 : 5);
    if (me == 0 ? rc != 0 : rc != GPUHELPER_EINVAL || strstr(gpuhelper_last_error(), "expected 5") == NULL)
        return fail("bcast with mismatched len", rc);
    free(all);
    printf("OK %d coll\n", me);
    return finalize();
}

static int mode_abort(int who)
{
    gpuhelper_info_t info;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if (info.rank == who) {
        const char *code = getenv("GHTEST_ABORT_CODE");
        gpuhelper_abort(code != NULL ? atoi(code) : 7, "ghtest gives up");
        return fail("gpuhelper_abort returned", GPUHELPER_EINTERNAL);
    }
    /* The launcher kills this process while it waits in the barrier, or the barrier ends first:
     * it fails (Open MPI: PARTIAL SUCCESS once a rank is gone), or even succeeds (a PMIx server
     * drops a dead local rank from a fence, and srun's cancel may come later). Either way the
     * launcher must kill this process soon: it waits long after, where only a kill ends it. */
    rc = gpuhelper_barrier();
    printf("WAIT %d abort: the barrier returned %d, waiting to be killed\n", info.rank, rc);
    sleep(100);
    return fail("not killed after another rank's gpuhelper_abort", rc);
}
#endif

#if GPUHELPER_VERSION_MINOR >= 1
static void *thread_barrier(void *arg)
{
    (void)arg;
    int rc = gpuhelper_barrier();
    printf("FAIL %d the barrier nobody else entered returned %d\n", env_rank(), rc);
    return NULL;
}

static int mode_abortwait(void)
{
    gpuhelper_info_t info;
    pthread_t th;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if (info.rank != 0) {
        sleep(100);
        return fail("not killed", GPUHELPER_EINTERNAL);
    }
    if (pthread_create(&th, NULL, thread_barrier, NULL) != 0)
        return fail("pthread_create", GPUHELPER_EINTERNAL);
    sleep(1); /* let the thread enter the barrier */
    gpuhelper_abort(7, "ghtest gives up");
    return fail("gpuhelper_abort returned", GPUHELPER_EINTERNAL);
}
#endif

#if GPUHELPER_VERSION_MINOR >= 3
static int mode_clique(void)
{
    gpuhelper_info_t info;
    int count = -1;
    int rc = init(&info);
    if (rc != 0)
        return fail("init", rc);
    if ((rc = gpuhelper_nvl_cliques(&count)) != 0)
        return fail("gpuhelper_nvl_cliques", rc);
    if ((rc = gpuhelper_nvl_cliques(NULL)) != GPUHELPER_EINVAL)
        return fail("gpuhelper_nvl_cliques(NULL)", rc);
    printf("CLIQUE %d %d %s\n", info.rank, count, info.nvl_clique[0] ? info.nvl_clique : "-");
    return finalize();
}

static void *thread_abort(void *arg)
{
    (void)arg;
    sleep(1); /* the main thread is in gpuhelper_init by now, waiting for rank 0 */
    gpuhelper_abort(7, "ghtest gives up");
    printf("FAIL %d gpuhelper_abort returned\n", env_rank());
    return NULL;
}

static int mode_abortininit(void)
{
    gpuhelper_info_t info;
    pthread_t th;
    int rc;
    if (env_rank() == 0) {
        sleep(100);
        return fail("not killed", GPUHELPER_EINTERNAL);
    }
    if (pthread_create(&th, NULL, thread_abort, NULL) != 0)
        return fail("pthread_create", GPUHELPER_EINTERNAL);
    rc = init(&info);
    return fail("init returned before the abort", rc);
}
#endif

static int mode_bigstruct(void)
{
    /* The caller's own struct, followed by other data: init must not touch the data. */
    struct {
        gpuhelper_info_t info;
        unsigned char after[64];
    } own;
    gpuhelper_info_t ref;
    int rc;
    memset(&own, 0x5a, sizeof(own));
    own.info.struct_size = sizeof(own.info);
    if ((rc = gpuhelper_init(&own.info)) != 0)
        return fail("init", rc);
    for (size_t i = 0; i < sizeof(own.after); i++)
        if (own.after[i] != 0x5a)
            return fail("init wrote past the caller's struct", GPUHELPER_EINTERNAL);
    if ((rc = init(&ref)) != 0)
        return fail("init", rc);
    if (own.info.struct_size != sizeof(own.info) || own.info.rank != ref.rank || own.info.size != ref.size ||
        memcmp(own.info.nccl_id, ref.nccl_id, sizeof(ref.nccl_id)) != 0)
        return fail("init gave another answer", GPUHELPER_EINTERNAL);
#if GPUHELPER_VERSION_MINOR >= 1
    /* Built against the current header, whose structs are the library's: a caller built against
     * a newer header has larger ones, ending in fields this library does not know. (Built
     * against an older header than the library's, the library's struct is larger: skip.) */
    char hv[32];
    snprintf(hv, sizeof(hv), "%d.%d.%d", GPUHELPER_VERSION_MAJOR, GPUHELPER_VERSION_MINOR, GPUHELPER_VERSION_PATCH);
    if (strcmp(hv, gpuhelper_version()) != 0) {
        printf("OK %d bigstruct (header %s, library %s)\n", ref.rank, hv, gpuhelper_version());
        return finalize();
    }
    struct {
        gpuhelper_info_t info;
        unsigned char newer[64];
    } big;
    struct {
        gpuhelper_group_t g;
        unsigned char newer[64];
    } bigg;
    memset(&big, 0x5a, sizeof(big));
    big.info.struct_size = sizeof(big);
    if ((rc = gpuhelper_init(&big.info)) != 0)
        return fail("init with a larger struct", rc);
    for (size_t i = 0; i < sizeof(big.newer); i++)
        if (big.newer[i] != 0x5a)
            return fail("init wrote past its own struct into the caller's newer fields", GPUHELPER_EINTERNAL);
    if (big.info.struct_size != sizeof(big) || !(big.info.rank == ref.rank && big.info.size == ref.size &&
                                                 memcmp(big.info.nccl_id, ref.nccl_id, sizeof(ref.nccl_id)) == 0))
        return fail("init with a larger struct gave another answer", GPUHELPER_EINTERNAL);
    memset(&bigg, 0x5a, sizeof(bigg));
    bigg.g.struct_size = sizeof(bigg);
    if ((rc = gpuhelper_group_id(GPUHELPER_COLOR_NODE, &bigg.g)) != 0)
        return fail("group_id with a larger struct", rc);
    for (size_t i = 0; i < sizeof(bigg.newer); i++)
        if (bigg.newer[i] != 0x5a)
            return fail("group_id wrote past its own struct", GPUHELPER_EINTERNAL);
    if (bigg.g.struct_size != sizeof(bigg) || bigg.g.size != ref.local_size || bigg.g.color != GPUHELPER_COLOR_NODE)
        return fail("group_id with a larger struct gave a wrong answer", GPUHELPER_EINTERNAL);
#endif
    printf("OK %d bigstruct %zu\n", ref.rank, sizeof(own.info));
    return finalize();
}

static int mode_gpu(void)
{
    gpuhelper_info_t info;
    int rc = init(&info), frc;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    double t0;
    printf("GPU %d %d %d %s %s %s | %s\n", env_rank(), rc, rc == 0 ? info.cuda_device : -9,
           rc == 0 && info.gpu_uuid[0] ? info.gpu_uuid : "-", rc == 0 && info.pci_bus_id[0] ? info.pci_bus_id : "-",
           cvd ? cvd : "(unset)", rc == 0 ? "" : gpuhelper_last_error());
    t0 = now();
    frc = gpuhelper_finalize();
    printf("FIN %d %d %.3f %s\n", env_rank(), frc, now() - t0, frc == 0 ? "" : gpuhelper_last_error());
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "gpubind: usage: ghtest MODE [ARG]\n");
        return 2;
    }
    const char *m = argv[1];
    int arg = argc > 2 ? atoi(argv[2]) : 0;
    const char *pre = getenv("GHTEST_PRELOAD");
    if (pre != NULL && *pre != '\0' && dlopen(pre, RTLD_NOW | RTLD_LOCAL) == NULL) {
        printf("FAIL %d GHTEST_PRELOAD: dlopen(%s): %s\n", env_rank(), pre, dlerror());
        return 1;
    }
    if (strcmp(m, "info") == 0)
        return mode_info(arg);
    if (strcmp(m, "die0") == 0)
        return mode_die0();
    if (strcmp(m, "late0") == 0)
        return mode_late0(arg);
    if (strcmp(m, "twice") == 0)
        return mode_twice();
    if (strcmp(m, "threads") == 0)
        return mode_threads();
    if (strcmp(m, "fork") == 0)
        return mode_fork();
    if (strcmp(m, "expect") == 0)
        return mode_expect(arg);
    if (strcmp(m, "userfn") == 0)
        return mode_userfn();
    if (strcmp(m, "badargs") == 0)
        return mode_badargs();
    if (strcmp(m, "bigstruct") == 0)
        return mode_bigstruct();
    if (strcmp(m, "reinit") == 0)
        return mode_reinit(arg);
    if (strcmp(m, "commid") == 0)
        return mode_commid();
    if (strcmp(m, "vers") == 0)
        return mode_vers();
    if (strcmp(m, "dlscope") == 0)
        return mode_dlscope();
    if (strcmp(m, "gpu") == 0)
        return mode_gpu();
#if GPUHELPER_VERSION_MINOR >= 1
    if (strcmp(m, "noid") == 0)
        return mode_noid();
    if (strcmp(m, "lateid") == 0)
        return mode_lateid();
    if (strcmp(m, "lazyid") == 0)
        return mode_lazyid();
    if (strcmp(m, "origin") == 0)
        return mode_origin();
    if (strcmp(m, "coll") == 0)
        return mode_coll();
    if (strcmp(m, "abort") == 0)
        return mode_abort(arg);
    if (strcmp(m, "abortwait") == 0)
        return mode_abortwait();
#endif
#if GPUHELPER_VERSION_MINOR >= 3
    if (strcmp(m, "abortininit") == 0)
        return mode_abortininit();
    if (strcmp(m, "clique") == 0)
        return mode_clique();
#endif
    fprintf(stderr, "gpubind: ghtest: unknown mode %s\n", m);
    return 2;
}
