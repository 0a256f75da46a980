/* process/hostport.c — HOST:PORT, a host alone, a port, and a listener's
 * address (process/hostport.h has the accepted forms).
 *
 * Hand-written rather than strtoul and a split at the last ':': strtoul
 * takes signs and leading spaces, and a split at the last ':' reads
 * "::1:7000" as host "::1", port 7000, which is also the text of the IPv6
 * address ::1:7000 with no port.
 *
 * Threads: [any thread]; sx__hostport_bind_addr may block in the resolver.
 */
#include "process/hostport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "process/stepx/process.h"

static const char M_EMPTY[] = "the host is empty";
static const char M_LONG[] = "the host is longer than 255 bytes";
static const char M_CHAR[] = "the host holds a character other than ASCII "
                             "letters, digits, '.', '-' and '_'";
static const char M_V6[] = "not an IPv6 address between the brackets";
static const char M_BARE_V6[] = "the host holds ':' but is not an IPv6 "
                                "address";
static const char M_ZONE[] = "the IPv6 zone after '%' must be 1 or more ASCII "
                             "letters, digits, '.', '-' or '_'";
static const char M_BRACKET[] = "a '[' without its ']'";
static const char M_AFTER[] = "expected ':PORT' after the ']'";
static const char M_AFTER_HOST[] = "the host goes on after its ']'";
static const char M_COLONS[] = "more than one ':' (an IPv6 address goes in "
                               "brackets: [::1]:PORT)";
static const char M_NOPORT[] = "no ':PORT' after the host";
static const char M_PORT_EMPTY[] = "the port after ':' is empty";
static const char M_PORT_JUNK[] = "the port is not a decimal number (digits "
                                  "only)";
static const char M_PORT_RANGE[] = "the port must be 1 to 65535";
static const char M_PORT_RANGE0[] = "the port must be 0 to 65535";

/* The characters of a name, an IPv4 address and an IPv6 zone. Not
 * isalnum: that depends on the locale. */
static bool name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/* s[0, len), no brackets: an IPv6 address, with an optional "%zone".
 * bad is the message for an address that does not read. */
static const char *ipv6_check(const char *s, size_t len, const char *bad)
{
    const char *pct = memchr(s, '%', len);
    size_t alen = pct != NULL ? (size_t)(pct - s) : len;
    char buf[INET6_ADDRSTRLEN];
    struct in6_addr a;
    /* A NUL would end inet_pton's reading early: "::1\0junk". */
    if (alen == 0 || alen >= sizeof buf || memchr(s, 0, alen) != NULL)
        return bad;
    memcpy(buf, s, alen);
    buf[alen] = 0;
    if (inet_pton(AF_INET6, buf, &a) != 1)
        return bad;
    if (pct != NULL) {
        size_t zlen = len - alen - 1;
        if (zlen == 0)
            return M_ZONE;
        for (size_t i = 0; i < zlen; i++)
            if (!name_char((unsigned char)pct[1 + i]))
                return M_ZONE;
    }
    return NULL;
}

/* s[0, len) as a host (brackets already removed when in_brackets); bare_v6
 * lets an unbracketed host with a ':' be an IPv6 address. */
static const char *host_set(const char *s, size_t len, bool in_brackets,
                            bool bare_v6, sx__hostport *out)
{
    if (len == 0)
        return M_EMPTY;
    if (len > SX__HOST_MAX)
        return M_LONG;
    const char *why = NULL;
    out->ipv6 = in_brackets || (bare_v6 && memchr(s, ':', len) != NULL);
    if (in_brackets)
        why = ipv6_check(s, len, M_V6);
    else if (out->ipv6)
        why = ipv6_check(s, len, M_BARE_V6);
    else
        for (size_t i = 0; i < len && why == NULL; i++)
            if (!name_char((unsigned char)s[i]))
                why = M_CHAR;
    if (why != NULL)
        return why;
    memcpy(out->host, s, len);
    out->host[len] = 0;
    return NULL;
}

const char *sx__port_check(int64_t port, unsigned flags)
{
    bool zero = (flags & SX__HOSTPORT_PORT_ZERO) != 0;
    if (port < (zero ? 0 : 1) || port > 65535)
        return zero ? M_PORT_RANGE0 : M_PORT_RANGE;
    return NULL;
}

/* s[0, len), the text after the ':'. */
static const char *port_set(const char *s, size_t len, unsigned flags,
                            sx__hostport *out)
{
    if (len == 0)
        return M_PORT_EMPTY;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return M_PORT_JUNK;
        v = v * 10 + (s[i] - '0');
        if (v > 65536)
            v = 65536; /* out of range either way; no overflow */
    }
    const char *why = sx__port_check(v, flags);
    if (why == NULL)
        out->port = (uint16_t)v;
    return why;
}

const char *sx__hostport_parse(const char *s, size_t len, unsigned flags,
                               uint16_t default_port, sx__hostport *out)
{
    const char *host = s, *port = NULL;
    size_t host_len = len, port_len = 0;
    bool in_brackets = len > 0 && s[0] == '[';
    if (in_brackets) {
        const char *rb = memchr(s, ']', len);
        if (rb == NULL)
            return M_BRACKET;
        host = s + 1;
        host_len = (size_t)(rb - host);
        size_t rest = len - (size_t)(rb + 1 - s);
        if (rest > 0) {
            if (rb[1] != ':')
                return M_AFTER;
            port = rb + 2;
            port_len = rest - 1;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        if (colon != NULL) {
            host_len = (size_t)(colon - s);
            port = colon + 1;
            port_len = len - host_len - 1;
            if (memchr(port, ':', port_len) != NULL)
                return M_COLONS;
        }
    }
    const char *why = host_set(host, host_len, in_brackets, false, out);
    if (why != NULL)
        return why;
    if (port == NULL) {
        if ((flags & SX__HOSTPORT_PORT_OPTIONAL) == 0)
            return M_NOPORT;
        out->port = default_port;
        return NULL;
    }
    return port_set(port, port_len, flags, out);
}

const char *sx__host_parse(const char *s, size_t len, sx__hostport *out)
{
    out->port = 0;
    if (len > 0 && s[0] == '[') {
        if (s[len - 1] != ']')
            return memchr(s, ']', len) != NULL ? M_AFTER_HOST : M_BRACKET;
        return host_set(s + 1, len - 2, true, false, out);
    }
    return host_set(s, len, false, true, out);
}

int sx__hostport_bind_addr(const sx__hostport *hp, struct sockaddr_storage *ss,
                           socklen_t *len)
{
    /* The loopback address that "localhost" names everywhere, whatever
     * order the resolver would give ::1 and 127.0.0.1 in. */
    const char *host =
        strcasecmp(hp->host, "localhost") == 0 ? "127.0.0.1" : hp->host;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = hp->ipv6 ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (hp->ipv6 ? AI_NUMERICHOST : 0);
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)hp->port);
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return SX_EINVAL;
    int rc = SX_EINVAL;
    for (const struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof(*ss)) {
            memset(ss, 0, sizeof(*ss));
            memcpy(ss, a->ai_addr, a->ai_addrlen);
            *len = a->ai_addrlen;
            rc = 0;
            break;
        }
    }
    freeaddrinfo(ai);
    return rc;
}
