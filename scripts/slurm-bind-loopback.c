/*
 * slurm-bind-loopback.c: an LD_PRELOAD shim that keeps a daemon's listening sockets on
 * loopback. scripts/slurm-cluster compiles it and runs slurmctld and slurmd under it.
 *
 * Slurm 22.05's slurmctld binds its port on 0.0.0.0 whatever NoInAddrAny says (and slurmd
 * binds 0.0.0.0 too); the test cluster must listen on loopback only. This bind() turns an
 * address of "any" into loopback (0.0.0.0 into 127.0.0.1, :: into ::1) and passes every
 * other address, and every other family, through unchanged.
 *
 * Build: gcc -shared -fPIC -O2 -o slurm-bind-loopback.so slurm-bind-loopback.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real_bind;
    if (!real_bind) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
        if (!real_bind) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof(in4));
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof(in4));
        }
    } else if (addr && addr->sa_family == AF_INET6
               && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof(in6));
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
            in6.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof(in6));
        }
    }
    return real_bind(fd, addr, len);
}
