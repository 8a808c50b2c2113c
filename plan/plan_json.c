/* A plan as one JSON object (gplan-inspect --json): its header fields, regions, devices, symbolic
 * dims, tensors and nodes (jansson, the keys in this order). */
#include "plan/plan.h"

#include <jansson.h>

static json_t *jname(const gp_plan *p, int id)
{
    return id >= 0 ? json_string(p->tensors[id].name) : json_null();
}

static json_t *plan_json(const gp_plan *p)
{
    json_t *o = json_object();
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d", p->version_major, p->version_minor);
    json_object_set_new(o, "graph", json_string(p->graph_name));
    json_object_set_new(o, "source", json_string(p->source));
    json_object_set_new(o, "format_version", json_string(ver));
    json_object_set_new(o, "n_devices", json_integer(p->n_devices));
    json_object_set_new(o, "method", json_string(p->method));
    json_object_set_new(o, "plan_seconds", json_real(p->plan_seconds));
    json_object_set_new(o, "alignment", json_integer(p->regions[GP_REGION_ARENA].alignment));
    json_object_set_new(o, "arena_bytes", json_integer(p->regions[GP_REGION_ARENA].size));
    json_object_set_new(o, "lower_bound_bytes", json_integer(p->lower_bound));
    json_object_set_new(o, "naive_bytes", json_integer(p->naive_bytes));
    json_object_set_new(o, "extras_bytes", json_integer(p->regions[GP_REGION_EXTRAS].size));
    json_object_set_new(o, "extras_record_bytes",
                        json_integer(GP_EXTRAS_RECORD_BYTES(p->n_devices)));
    json_object_set_new(o, "n_tensors", json_integer(p->n_tensors));
    json_object_set_new(o, "n_nodes", json_integer(p->n_nodes));
    json_t *regions = json_object();
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        json_t *rj = json_object();
        json_object_set_new(rj, "size", json_integer(p->regions[r].size));
        json_object_set_new(rj, "alignment", json_integer(p->regions[r].alignment));
        json_object_set_new(regions, gp_region_name((gp_region)r), rj);
    }
    json_object_set_new(o, "regions", regions);
    /* Each device's memory: the same regions (one layout), its own split-weight padding. */
    json_t *devs = json_array();
    for (int d = 0; d < p->n_devices; d++) {
        json_t *dj = json_object();
        json_object_set_new(dj, "device", json_integer(d));
        for (int r = 0; r < GP_REGION_EXTRAS; r++)
            json_object_set_new(dj, gp_region_name((gp_region)r), json_integer(p->regions[r].size));
        json_object_set_new(dj, "split_padding", json_integer(gp_plan_split_padding(p, d)));
        json_array_append_new(devs, dj);
    }
    json_object_set_new(o, "devices", devs);
    json_t *syms = json_array();
    for (int s = 0; s < p->n_syms; s++) {
        json_t *sj = json_object();
        json_object_set_new(sj, "name", json_string(p->syms[s].name));
        json_object_set_new(sj, "bound", json_integer(p->syms[s].bound));
        json_array_append_new(syms, sj);
    }
    json_object_set_new(o, "syms", syms);
    json_t *tensors = json_array();
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        json_t *tj = json_object();
        json_t *shape = json_array(), *tsyms = json_array();
        for (int d = 0; d < t->ndim; d++) {
            json_array_append_new(shape, json_integer(t->dims[d]));
            json_array_append_new(tsyms, t->sym[d] >= 0 ? json_string(p->syms[t->sym[d]].name)
                                                        : json_null());
        }
        json_object_set_new(tj, "id", json_integer(i));
        json_object_set_new(tj, "name", json_string(t->name));
        json_object_set_new(tj, "kind", json_string(gp_tensor_kind_name(t->kind)));
        json_object_set_new(tj, "dtype", json_string(gp_dtype_name(t->dtype)));
        json_object_set_new(tj, "shape", shape);
        json_object_set_new(tj, "syms", tsyms);
        json_object_set_new(tj, "region", json_string(gp_region_name(t->region)));
        json_object_set_new(tj, "offset", json_integer(t->offset));
        json_object_set_new(tj, "size", json_integer(t->size));
        json_object_set_new(tj, "first", json_integer(t->first));
        json_object_set_new(tj, "last", json_integer(t->last));
        json_object_set_new(tj, "inplace_of", jname(p, t->inplace_of));
        json_object_set_new(tj, "view_of", jname(p, t->view_src));
        json_object_set_new(tj, "view_offset", json_integer(t->view_offset));
        json_object_set_new(tj, "workspace", json_boolean(gp_plan_is_workspace(p, i)));
        json_object_set_new(tj, "weight_name",
                            t->weight_name ? json_string(t->weight_name) : json_null());
        json_object_set_new(tj, "extras_offset", json_integer(t->extras_offset));
        json_t *sj = json_null();
        if (t->split.groups) {
            sj = json_object();
            json_object_set_new(sj, "dim", json_integer(t->split.dim));
            json_object_set_new(sj, "groups", json_integer(t->split.groups));
            json_object_set_new(sj, "unit", json_integer(t->split.unit));
            json_object_set_new(sj, "full", json_integer(t->split.full));
        }
        json_object_set_new(tj, "split", sj);
        json_array_append_new(tensors, tj);
    }
    json_object_set_new(o, "tensors", tensors);
    json_t *nodes = json_array();
    for (int s = 0; s < p->n_nodes; s++) {
        const gp_plan_node *nd = &p->nodes[s];
        json_t *nj = json_object(), *ins = json_array();
        for (int k = 0; k < nd->n_inputs; k++)
            json_array_append_new(ins, jname(p, nd->inputs[k]));
        json_object_set_new(nj, "step", json_integer(s));
        json_object_set_new(nj, "op", json_string(gp_op_get(nd->op)->name));
        json_object_set_new(nj, "inputs", ins);
        json_object_set_new(nj, "output", jname(p, nd->output));
        json_object_set_new(nj, "workspace", jname(p, nd->workspace));
        json_object_set_new(nj, "line", json_integer(nd->line));
        json_object_set_new(nj, "col", json_integer(nd->col));
        json_array_append_new(nodes, nj);
    }
    json_object_set_new(o, "nodes", nodes);
    return o;
}

int gp_plan_json_print(const gp_plan *p, FILE *out)
{
    json_t *j = plan_json(p);
    int rc = j && json_dumpf(j, out, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0 ? 0 : -1;
    fputc('\n', out);
    json_decref(j);
    return rc;
}
