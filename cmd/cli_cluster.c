/* cmd/cli_cluster.c — the stepx CLI's cluster commands (docs/CLUSTER.md):
 * nodes (the members, or with --json the whole reply), and ps --cluster
 * (every member's processes, gathered node by node).
 * Threads: the CLI's one thread.
 */
#include "cmd/cli.h"

#include <stdio.h>
#include <string.h>

/* ps --cluster: every member's processes, each entry with its "node"; a
 * node that cannot answer is named on stderr and skipped. */
int cli_fetch_ps_cluster(cli *c, int64_t limit, json_t **out)
{
    json_t *nodes;
    int rc = cli_fetch(c, "nodes", -1, 0, "nodes", &nodes);
    if (rc != 0)
        return rc;
    json_t *all = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(nodes, i, m)
    {
        json_int_t node = json_integer_value(json_object_get(m, "node"));
        bool self = json_is_true(json_object_get(m, "self"));
        json_t *procs;
        if (cli_fetch(c, "ps", limit, self ? 0 : node, "processes", &procs) !=
            0) {
            fprintf(stderr,
                    "stepx: ps --cluster: node %lld did not answer; "
                    "its processes are not listed\n",
                    (long long)node);
            continue;
        }
        size_t k;
        json_t *p;
        json_array_foreach(procs, k, p)
        {
            json_object_set_new(p, "node", json_integer(node));
            json_array_append(all, p);
        }
        json_decref(procs);
    }
    json_decref(nodes);
    *out = all;
    return 0;
}

/* nodes: the cluster's members (docs/CLUSTER.md), as a table; --json:
 * the whole reply (cluster, membership figures, nodes). */
int cli_cmd_nodes(cli *c)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_fmt(&pk, "{s:s}", "op", "nodes");
    sx_reply r;
    int rc = cli_run(c, "nodes", &pk, cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    json_t *nodes = cli_get_json(r.body, "nodes");
    if (nodes == NULL) {
        sx_reply_free(&r);
        return cli_fail(CLI_INTERNAL, "nodes: the reply has no readable "
                                      "'nodes'");
    }
    if (c->a->json) {
        json_t *o = json_object();
        json_object_set_new(o, "ok", json_true());
        json_t *cl = cli_get_json(r.body, "cluster");
        json_t *mb = cli_get_json(r.body, "membership");
        json_object_set_new(o, "cluster", cl != NULL ? cl : json_null());
        json_object_set_new(o, "membership", mb != NULL ? mb : json_null());
        json_object_set_new(o, "nodes", nodes);
        sx_reply_free(&r);
        cli_json_print(o);
        json_decref(o);
        return CLI_OK;
    }
    sx_reply_free(&r);
    static const char *const keys[] = {
        "node",          "incarnation",  "address",     "processes",  "load",
        "last_heard_ms", "messages_out", "messages_in", "reconnects", "self"
    };
    cli_print_table(stdout, nodes, keys, 10);
    json_decref(nodes);
    return CLI_OK;
}
