/* Liveness over the schedule: each tensor's first and last step, and the storage root it shares with
 * its views, whose life its readers extend. */
#include "planner/planner.h"

#include <stdlib.h>

void gp_liveness_free(gp_liveness *lv)
{
    if (!lv)
        return;
    free(lv->first);
    free(lv->last);
    free(lv->root);
    free(lv->root_offset);
    free(lv->storage_last);
    free(lv);
}

gp_liveness *gp_liveness_new(const gp_graph *g, gp_diag *d)
{
    gp_loc nowhere = {0};
    gp_liveness *lv = calloc(1, sizeof *lv);
    size_t n = g->n_tensors > 0 ? (size_t)g->n_tensors : 1;
    if (lv) {
        lv->n_tensors = g->n_tensors;
        lv->first = malloc(n * sizeof *lv->first);
        lv->last = malloc(n * sizeof *lv->last);
        lv->root = malloc(n * sizeof *lv->root);
        lv->root_offset = malloc(n * sizeof *lv->root_offset);
        lv->storage_last = malloc(n * sizeof *lv->storage_last);
    }
    if (!lv || !lv->first || !lv->last || !lv->root || !lv->root_offset || !lv->storage_last) {
        gp_liveness_free(lv);
        gp_diag_error(d, nowhere, "liveness: out of memory for %d tensors", g->n_tensors);
        return NULL;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        int p = g->tensors[t].producer;
        lv->first[t] = p >= 0 ? p : 0;
        lv->last[t] = lv->first[t];
        lv->storage_last[t] = -1;
    }
    /* Readers, in schedule order: the last one wins. */
    for (int s = 0; s < g->n_nodes; s++) {
        const gp_node *nd = &g->nodes[s];
        for (int k = 0; k < nd->n_inputs; k++) {
            int t = nd->inputs[k];
            GP_ASSERT(t >= 0 && t < g->n_tensors);
            if (lv->last[t] < s)
                lv->last[t] = s;
        }
    }
    /* Views point at tensors made before them (the IR adds nodes in order), so one pass in id
     * order resolves every chain; a chain that points forward is a malformed graph. */
    for (int t = 0; t < g->n_tensors; t++) {
        const gp_tensor *tt = &g->tensors[t];
        if (tt->view_src < 0) {
            lv->root[t] = t;
            lv->root_offset[t] = 0;
            continue;
        }
        if (tt->view_src >= t) {
            gp_diag_error(d, tt->loc, "tensor %s views tensor %d, which is not defined before it",
                          tt->name, tt->view_src);
            gp_liveness_free(lv);
            return NULL;
        }
        lv->root[t] = lv->root[tt->view_src];
        lv->root_offset[t] = lv->root_offset[tt->view_src] + tt->view_offset;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        int r = lv->root[t];
        if (lv->storage_last[r] < lv->last[t])
            lv->storage_last[r] = lv->last[t];
    }
    return lv;
}
