/* process/hostport.h — the one reading of "HOST:PORT" shared inside the
 * project (not public, not installed): the relay server's listen address
 * and the relay client's TCP address (relay/), stepxd's --listen and
 * --metrics and the stepx CLI's --connect (cmd/), and the net command
 * family's hosts: net.connect's [host, port] and net.http's url (engine/).
 *
 * The accepted forms, everywhere:
 *
 *   HOST:PORT    HOST is an IPv4 address or a name ("127.0.0.1",
 *                "localhost", "example.com"): 1-255 bytes of ASCII
 *                letters, digits, '.', '-' and '_';
 *   [IPV6]:PORT  or an IPv6 address in brackets ("[::1]", "[fe80::1%eth0]":
 *                a zone after '%' is 1 or more of the same characters).
 *   PORT         decimal digits only (leading zeros allowed), 1 to 65535;
 *                0 too where the caller listens (SX__HOSTPORT_PORT_ZERO:
 *                the system picks a free port).
 *
 * Refused, each with its own message: an empty host (":7000", "[]:7000"),
 * no port ("127.0.0.1", "127.0.0.1:"), a bare IPv6 address ("::1:7000":
 * which colon starts the port?), a '[' without its ']', anything but an
 * IPv6 address in brackets, anything but ":PORT" after the ']', a host over
 * 255 bytes, a character outside the sets above (spaces, control bytes,
 * NUL, '/', '@', non-ASCII), and a port with a sign, a space, other junk,
 * or out of range. Names are not looked up here: a caller that needs an
 * address resolves the host it got (sx__hostport_bind_addr for listeners).
 *
 * Unix socket paths ("unix:PATH", or a path with a '/') are no HOST:PORT:
 * the callers that take them (sx_client_connect, stepx --connect) tell
 * them apart before they call this.
 *
 * Threads: [any thread]. The parsers are pure; sx__hostport_bind_addr may
 * block in the system's resolver.
 */
#ifndef SX_PROCESS_HOSTPORT_H
#define SX_PROCESS_HOSTPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The longest host, without brackets: a DNS name's limit. */
#define SX__HOST_MAX 255

typedef struct {
    char host[SX__HOST_MAX + 1]; /* NUL-terminated, without brackets     */
    uint16_t port;
    bool ipv6; /* host is an IPv6 address: written "[host]:port" */
} sx__hostport;

/* Flags for sx__hostport_parse and sx__port_check. */
#define SX__HOSTPORT_PORT_ZERO 1u     /* port 0 is accepted (a listener)   */
#define SX__HOSTPORT_PORT_OPTIONAL 2u /* "HOST" alone takes default_port   */

/* Reads s[0, len) as HOST:PORT (above) into *out. Returns NULL, or a
 * static message saying what is wrong (e.g. "no ':PORT' after the
 * host"), for the caller to prefix with what it was reading; *out is
 * then unspecified. default_port is used only with
 * SX__HOSTPORT_PORT_OPTIONAL, and then may be anything. */
const char *sx__hostport_parse(const char *s, size_t len, unsigned flags,
                               uint16_t default_port, sx__hostport *out);

/* Reads s[0, len) as a host alone, for callers that take the port apart
 * (net.connect's [host, port]): the HOST forms above, and also a bare IPv6
 * address ("::1"), which is unambiguous with no port after it. Sets
 * out->host and out->ipv6, and out->port to 0. Returns NULL or a static
 * message, as sx__hostport_parse does. */
const char *sx__host_parse(const char *s, size_t len, sx__hostport *out);

/* Checks a port given as a number: NULL when it is 1 to 65535 (0 too with
 * SX__HOSTPORT_PORT_ZERO), else the same message sx__hostport_parse gives
 * for that port. */
const char *sx__port_check(int64_t port, unsigned flags);

/* The address a listener binds for hp: an IPv4 or IPv6 address as given,
 * "localhost" (any case) as 127.0.0.1, a name as the first address the
 * resolver gives for it. Fills *ss and *len. Returns 0, or SX_EINVAL when
 * the host does not resolve to an IPv4 or IPv6 address. May block. */
int sx__hostport_bind_addr(const sx__hostport *hp, struct sockaddr_storage *ss,
                           socklen_t *len);

#endif
