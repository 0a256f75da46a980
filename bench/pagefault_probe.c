/* bench/pagefault_probe.c — how much a fresh page costs on this machine.
 *
 *   pagefault-probe [MiB]      (default 256)
 *
 * Maps MiB of anonymous memory, touches one byte per 4 KiB page and prints
 * `pagefault_us=<us per page>`. bench/run.sh records it with the machine:
 * on a virtual machine whose page faults trap to the hypervisor it is tens
 * of microseconds, and then every workload that grows its memory (spawnidle,
 * skynet, a fanin backlog) pays mostly for page faults.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    size_t len = mib << 20, page = 4096;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mib == 0 || p == MAP_FAILED)
        return 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < len; i += page)
        p[i] = 1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s =
        (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("pagefault_us=%.2f\n", s * 1e6 / (double)(len / page));
    munmap(p, len);
    return 0;
}
