/*
 * spawn_floor: the bare cost of running a program, as a floor no HTTP
 * server that runs a program per request can beat on this machine.
 *
 *   spawn_floor SECONDS [PROCS] [PROGRAM]
 *
 * Starts PROCS worker processes (default 1); each does posix_spawn +
 * waitpid of PROGRAM (default /bin/true, no arguments, empty environment
 * except PATH, stdin/stdout/stderr inherited) in a loop for SECONDS
 * seconds. Prints one line:
 *
 *   spawns=N seconds=S per_sec=R procs=P
 *
 * Build: cc -O2 -o spawn_floor spawn_floor.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: spawn_floor SECONDS [PROCS] [PROGRAM]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    int procs = argc > 2 ? atoi(argv[2]) : 1;
    const char *program = argc > 3 ? argv[3] : "/bin/true";
    if (seconds <= 0 || procs < 1 || procs > 256) {
        fprintf(stderr, "spawn_floor: bad arguments\n");
        return 2;
    }

    /* one counter per worker, shared with the parent */
    unsigned long *counts = mmap(NULL, sizeof(unsigned long) * (size_t)procs,
                                 PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (counts == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(counts, 0, sizeof(unsigned long) * (size_t)procs);

    char *child_argv[] = {(char *)program, NULL};
    char *child_envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};

    double start = now();
    double deadline = start + seconds;
    for (int w = 0; w < procs; w++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            unsigned long n = 0;
            while (now() < deadline) {
                pid_t child;
                int rc = posix_spawn(&child, program, NULL, NULL, child_argv,
                                     child_envp);
                if (rc != 0) {
                    fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
                    _exit(1);
                }
                int status;
                while (waitpid(child, &status, 0) < 0) {
                    if (errno != EINTR) {
                        perror("waitpid");
                        _exit(1);
                    }
                }
                n++;
            }
            counts[w] = n;
            _exit(0);
        }
    }
    int failed = 0;
    for (int w = 0; w < procs; w++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    double elapsed = now() - start;
    unsigned long total = 0;
    for (int w = 0; w < procs; w++)
        total += counts[w];
    printf("spawns=%lu seconds=%.3f per_sec=%.1f procs=%d\n", total, elapsed,
           (double)total / elapsed, procs);
    return failed;
}
