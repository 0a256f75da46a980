/* tests/process/test_hostport.c — the shared HOST:PORT rules
 * (process/hostport.h): every accepted form, every refused one with its
 * message, a host alone (net.connect's), a port as a number, and the
 * address a listener binds. The callers' own tests show that each uses
 * these rules: tests/relay/test_server.c (listen and client addresses),
 * tests/io/test_net.c (net.connect and net.http), tests/cmd/test_cli.sh
 * (stepxd --listen and --metrics, stepx --connect).
 *
 * Threads: single-threaded.
 */
#include "process/hostport.h"
#include "process/stepx/process.h"
#include "tests/support/harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *parse(const char *s, unsigned flags, sx__hostport *out)
{
    return sx__hostport_parse(s, strlen(s), flags, 80, out);
}

/* A host of n bytes: "aaa...". */
static const char *long_host(size_t n, const char *tail)
{
    static char buf[600];
    memset(buf, 'a', n);
    snprintf(buf + n, sizeof buf - n, "%s", tail);
    return buf;
}

/* Each accepted form gives the host without brackets, the port, and
 * whether the host is an IPv6 address; leading zeros in the port are
 * fine, 1 and 65535 are the bounds, and a host may be 255 bytes. */
static void test_accepted(void)
{
    static const struct {
        const char *text;
        const char *host;
        unsigned port;
        bool ipv6;
    } cases[] = {
        { "127.0.0.1:7000", "127.0.0.1", 7000, false },
        { "0.0.0.0:65535", "0.0.0.0", 65535, false },
        { "localhost:1", "localhost", 1, false },
        { "example.com:80", "example.com", 80, false },
        { "My_Host-1.example.:8080", "My_Host-1.example.", 8080, false },
        { "h:007000", "h", 7000, false },
        { "[::1]:7000", "::1", 7000, true },
        { "[::]:9", "::", 9, true },
        { "[::ffff:127.0.0.1]:7000", "::ffff:127.0.0.1", 7000, true },
        { "[fe80::1%eth0]:7000", "fe80::1%eth0", 7000, true },
        { "[2001:DB8::A]:443", "2001:DB8::A", 443, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx__hostport hp;
        const char *why = parse(cases[i].text, 0, &hp);
        if (why != NULL)
            SX_FAILF("'%s': %s", cases[i].text, why);
        CHECK_STR(hp.host, cases[i].host);
        CHECK_EQ_INT(hp.port, cases[i].port);
        CHECK(hp.ipv6 == cases[i].ipv6);
    }
    sx__hostport hp;
    CHECK(parse(long_host(255, ":1"), 0, &hp) == NULL);
    CHECK_EQ_INT(strlen(hp.host), 255);
    /* Only the given length is read: "127.0.0.1:70" of "127.0.0.1:7000". */
    CHECK(sx__hostport_parse("127.0.0.1:7000", 12, 0, 0, &hp) == NULL);
    CHECK_EQ_INT(hp.port, 70);
}

/* Port 0 only with SX__HOSTPORT_PORT_ZERO (a listener), and then it says
 * so in its range message. */
static void test_port_zero(void)
{
    sx__hostport hp;
    CHECK(parse("127.0.0.1:0", SX__HOSTPORT_PORT_ZERO, &hp) == NULL);
    CHECK_EQ_INT(hp.port, 0);
    CHECK(parse("[::1]:00", SX__HOSTPORT_PORT_ZERO, &hp) == NULL);
    CHECK_EQ_INT(hp.port, 0);
    CHECK_STR(parse("127.0.0.1:0", 0, &hp), "the port must be 1 to 65535");
    CHECK_STR(parse("127.0.0.1:65536", SX__HOSTPORT_PORT_ZERO, &hp),
              "the port must be 0 to 65535");
}

/* With SX__HOSTPORT_PORT_OPTIONAL a host alone takes the default port; a
 * ':' with nothing after it is still refused. */
static void test_port_optional(void)
{
    sx__hostport hp;
    CHECK(parse("example.com", SX__HOSTPORT_PORT_OPTIONAL, &hp) == NULL);
    CHECK_STR(hp.host, "example.com");
    CHECK_EQ_INT(hp.port, 80);
    CHECK(parse("[::1]", SX__HOSTPORT_PORT_OPTIONAL, &hp) == NULL);
    CHECK_STR(hp.host, "::1");
    CHECK(hp.ipv6);
    CHECK_EQ_INT(hp.port, 80);
    CHECK(parse("example.com:8080", SX__HOSTPORT_PORT_OPTIONAL, &hp) == NULL);
    CHECK_EQ_INT(hp.port, 8080);
    CHECK_STR(parse("example.com:", SX__HOSTPORT_PORT_OPTIONAL, &hp),
              "the port after ':' is empty");
    CHECK_STR(parse("::1", SX__HOSTPORT_PORT_OPTIONAL, &hp),
              "more than one ':' (an IPv6 address goes in brackets: "
              "[::1]:PORT)");
    CHECK_STR(parse("", SX__HOSTPORT_PORT_OPTIONAL, &hp), "the host is empty");
}

/* Every refused form, with the message that says why. */
static void test_refused(void)
{
    static const char M_EMPTY[] = "the host is empty";
    static const char M_CHAR[] = "the host holds a character other than "
                                 "ASCII letters, digits, '.', '-' and '_'";
    static const char M_V6[] = "not an IPv6 address between the brackets";
    static const char M_ZONE[] = "the IPv6 zone after '%' must be 1 or more "
                                 "ASCII letters, digits, '.', '-' or '_'";
    static const char M_BRACKET[] = "a '[' without its ']'";
    static const char M_AFTER[] = "expected ':PORT' after the ']'";
    static const char M_COLONS[] = "more than one ':' (an IPv6 address goes "
                                   "in brackets: [::1]:PORT)";
    static const char M_NOPORT[] = "no ':PORT' after the host";
    static const char M_PEMPTY[] = "the port after ':' is empty";
    static const char M_JUNK[] = "the port is not a decimal number (digits "
                                 "only)";
    static const char M_RANGE[] = "the port must be 1 to 65535";
    static const struct {
        const char *text;
        const char *why;
    } cases[] = {
        { "", M_EMPTY },
        { ":7000", M_EMPTY },
        { "[]:7000", M_EMPTY },
        { "127.0.0.1", M_NOPORT },
        { "localhost", M_NOPORT },
        { "[::1]", M_NOPORT },
        { "127.0.0.1:", M_PEMPTY },
        { "[::1]:", M_PEMPTY },
        { "127.0.0.1:0", M_RANGE },
        { "127.0.0.1:00000", M_RANGE },
        { "127.0.0.1:65536", M_RANGE },
        { "127.0.0.1:99999999999999999999999999", M_RANGE },
        { "127.0.0.1:-1", M_JUNK },
        { "127.0.0.1:+80", M_JUNK },
        { "127.0.0.1:12ab", M_JUNK },
        { "127.0.0.1: 80", M_JUNK },
        { "127.0.0.1:80 ", M_JUNK },
        { "127.0.0.1:80\n", M_JUNK },
        { "127.0.0.1:0x50", M_JUNK },
        { "[::1]:80]", M_JUNK },
        { "unix:/tmp/x.sock", M_JUNK },
        { "127.0.0.1:80:90", M_COLONS },
        { "::1:7000", M_COLONS },
        { "::1", M_COLONS },
        { "fe80::1:7000", M_COLONS },
        { "[::1", M_BRACKET },
        { "[::1:7000", M_BRACKET },
        { "[", M_BRACKET },
        { "[::1]7000", M_AFTER },
        { "[::1] :7000", M_AFTER },
        { "[::1]]:7000", M_AFTER },
        { "[localhost]:7000", M_V6 },
        { "[127.0.0.1]:7000", M_V6 },
        { "[::g]:7000", M_V6 },
        { "[ ::1]:7000", M_V6 },
        { "[::1%]:7000", M_ZONE },
        { "[::1% x]:7000", M_ZONE },
        { "[::1%\r\nX: y]:7000", M_ZONE },
        { "[%eth0]:7000", M_V6 },
        { " 127.0.0.1:7000", M_CHAR },
        { "127.0.0.1 :7000", M_CHAR },
        { "local host:7000", M_CHAR },
        { "a\tb:7000", M_CHAR },
        { "host/x:80", M_CHAR },
        { "user@host:80", M_CHAR },
        { "h\xc3\xa9:80", M_CHAR },
        { "a]:80", M_CHAR },
        { "a[b]:80", M_CHAR },
        { "*:80", M_CHAR },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx__hostport hp;
        const char *why = parse(cases[i].text, 0, &hp);
        if (why == NULL || strcmp(why, cases[i].why) != 0)
            SX_FAILF("'%s': got \"%s\", want \"%s\"", cases[i].text,
                     why != NULL ? why : "(accepted)", cases[i].why);
    }
    sx__hostport hp;
    CHECK_STR(parse(long_host(256, ":1"), 0, &hp),
              "the host is longer than 255 bytes");
    /* A NUL is a character like any other: refused, never read past. */
    CHECK_STR(sx__hostport_parse("127.0.0.1\0:80", 13, 0, 0, &hp), M_CHAR);
    CHECK_STR(sx__hostport_parse("[::1\0]:80", 9, 0, 0, &hp), M_V6);
    CHECK_STR(sx__hostport_parse("127.0.0.1:8\0", 12, 0, 0, &hp), M_JUNK);
    CHECK_STR(sx__hostport_parse("[::1%a\0]:80", 11, 0, 0, &hp), M_ZONE);
}

/* A host alone (net.connect): the forms above, plus a bare IPv6 address,
 * which has no port to be confused with. */
static void test_host_alone(void)
{
    static const struct {
        const char *text;
        const char *host;
        bool ipv6;
    } ok[] = {
        { "127.0.0.1", "127.0.0.1", false },
        { "localhost", "localhost", false },
        { "example.com", "example.com", false },
        { "::1", "::1", true },
        { "[::1]", "::1", true },
        { "fe80::1%lo", "fe80::1%lo", true },
        { "[fe80::1%lo]", "fe80::1%lo", true },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sx__hostport hp;
        hp.port = 99;
        const char *why = sx__host_parse(ok[i].text, strlen(ok[i].text), &hp);
        if (why != NULL)
            SX_FAILF("'%s': %s", ok[i].text, why);
        CHECK_STR(hp.host, ok[i].host);
        CHECK(hp.ipv6 == ok[i].ipv6);
        CHECK_EQ_INT(hp.port, 0);
    }
    static const struct {
        const char *text;
        const char *why;
    } bad[] = {
        { "", "the host is empty" },
        { "[]", "the host is empty" },
        { "[::1", "a '[' without its ']'" },
        { "[", "a '[' without its ']'" },
        { "[::1]:80", "the host goes on after its ']'" },
        { "127.0.0.1:80", "the host holds ':' but is not an IPv6 address" },
        { "::g", "the host holds ':' but is not an IPv6 address" },
        { "[localhost]", "not an IPv6 address between the brackets" },
        { "::1%", "the IPv6 zone after '%' must be 1 or more ASCII letters, "
                  "digits, '.', '-' or '_'" },
        { "a b", "the host holds a character other than ASCII letters, "
                 "digits, '.', '-' and '_'" },
        { "a\r\nb", "the host holds a character other than ASCII letters, "
                    "digits, '.', '-' and '_'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sx__hostport hp;
        const char *why = sx__host_parse(bad[i].text, strlen(bad[i].text), &hp);
        if (why == NULL || strcmp(why, bad[i].why) != 0)
            SX_FAILF("'%s': got \"%s\", want \"%s\"", bad[i].text,
                     why != NULL ? why : "(accepted)", bad[i].why);
    }
    sx__hostport hp;
    CHECK(sx__host_parse(long_host(255, ""), 255, &hp) == NULL);
    CHECK_STR(sx__host_parse(long_host(256, ""), 256, &hp),
              "the host is longer than 255 bytes");
    CHECK_STR(sx__host_parse("a\0b", 3, &hp),
              "the host holds a character other than ASCII letters, "
              "digits, '.', '-' and '_'");
}

/* A port given as a number: the same range and messages as in text. */
static void test_port_check(void)
{
    CHECK(sx__port_check(1, 0) == NULL);
    CHECK(sx__port_check(65535, 0) == NULL);
    CHECK_STR(sx__port_check(0, 0), "the port must be 1 to 65535");
    CHECK_STR(sx__port_check(65536, 0), "the port must be 1 to 65535");
    CHECK_STR(sx__port_check(-1, 0), "the port must be 1 to 65535");
    CHECK_STR(sx__port_check(INT64_MIN, 0), "the port must be 1 to 65535");
    CHECK(sx__port_check(0, SX__HOSTPORT_PORT_ZERO) == NULL);
    CHECK_STR(sx__port_check(-1, SX__HOSTPORT_PORT_ZERO),
              "the port must be 0 to 65535");
}

/* A listener's address: literals as given, "localhost" (any case) as
 * 127.0.0.1 whatever the resolver would answer first, with the port. No
 * name that needs DNS is looked up: the tests run without a network. */
static void test_bind_addr(void)
{
    sx__hostport hp;
    struct sockaddr_storage ss;
    socklen_t len = 0;
    CHECK(parse("127.0.0.1:7000", 0, &hp) == NULL);
    CHECK_RC(sx__hostport_bind_addr(&hp, &ss, &len), 0);
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)&ss;
    CHECK_EQ_INT(ss.ss_family, AF_INET);
    CHECK_EQ_INT(len, sizeof(struct sockaddr_in));
    CHECK_EQ_INT(ntohs(v4->sin_port), 7000);
    CHECK_EQ_U64(ntohl(v4->sin_addr.s_addr), 0x7f000001);

    const char *locals[] = { "localhost:0", "LocalHost:0" };
    for (size_t i = 0; i < 2; i++) {
        CHECK(parse(locals[i], SX__HOSTPORT_PORT_ZERO, &hp) == NULL);
        CHECK_RC(sx__hostport_bind_addr(&hp, &ss, &len), 0);
        CHECK_EQ_INT(ss.ss_family, AF_INET);
        CHECK_EQ_U64(ntohl(v4->sin_addr.s_addr), 0x7f000001);
        CHECK_EQ_INT(ntohs(v4->sin_port), 0);
    }

    CHECK(parse("0.0.0.0:65535", 0, &hp) == NULL);
    CHECK_RC(sx__hostport_bind_addr(&hp, &ss, &len), 0);
    CHECK_EQ_INT(ss.ss_family, AF_INET);
    CHECK_EQ_U64(ntohl(v4->sin_addr.s_addr), 0);
    CHECK_EQ_INT(ntohs(v4->sin_port), 65535);

    CHECK(parse("[::1]:7001", 0, &hp) == NULL);
    CHECK_RC(sx__hostport_bind_addr(&hp, &ss, &len), 0);
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&ss;
    CHECK_EQ_INT(ss.ss_family, AF_INET6);
    CHECK_EQ_INT(len, sizeof(struct sockaddr_in6));
    CHECK(IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr));
    CHECK_EQ_INT(ntohs(v6->sin6_port), 7001);
}

static const sx_test_case cases[] = {
    { "accepted", test_accepted },           { "port_zero", test_port_zero },
    { "port_optional", test_port_optional }, { "refused", test_refused },
    { "host_alone", test_host_alone },       { "port_check", test_port_check },
    { "bind_addr", test_bind_addr },
};

SX_TEST_MAIN(cases)
