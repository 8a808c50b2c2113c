/* The CUDA backend's copies: an eval's sizes and inputs to the device, its outputs back, as few
 * as the io region's layout allows ("copies"; see below). */
#include <stdatomic.h>
#include <stdlib.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_be.h"

/* A copy in a graph costs more than its bytes: each is a node the copy engine runs after the one
 * before it. So, with "copies" on, an eval's sizes and inputs go to the device in one copy: the
 * sizes sit in the header right before the io region's device base, the inputs at the start of
 * the region (the planner's order), and gp_cuda_be_eval stages both in pin_in. The outputs come
 * back in one copy per run of them whose gaps are each a tensor's unused rows (GPT-2's next, then
 * its logits, in one), or, in one-token evals, with none: the argmax kernel writes them to the
 * host (plan_argmax_copy). Off: a copy per size block and per tensor, from and into the io
 * block. */

/* Bytes of a run's gap a merged copy may carry: at PCIe rates, ~0.3 us. The most bytes an
 * argmax writes to the host as it reads them (plan_argmax_copy): for a 512-token prompt's 103 MB
 * of logits, a copy after it is faster. */
enum { COPY_GAP = 16384, ARGMAX_COPY_MAX = 524288 };

/* Copies enqueued by evals, every session: all of them, and those carrying more than one
 * transfer. */
static atomic_llong all_copies, merged_copies;

int64_t gp_cuda_copies_count(int merged)
{
    return atomic_load(merged ? &merged_copies : &all_copies);
}

/* cudaMemcpyAsync on b's stream, counted. */
static cudaError_t copy(cuda_be *b, void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                        int merged)
{
    atomic_fetch_add(&all_copies, 1);
    if (merged)
        atomic_fetch_add(&merged_copies, 1);
    return cudaMemcpyAsync(dst, src, n, k, b->stream);
}

static size_t used_bytes(const gp_plan_tensor *t, const int64_t *syms)
{
    return (size_t)(numel_at(t, syms) * (int64_t)gp_dtype_size(t->dtype));
}

/* Tensor t's bytes in the io region, padding included. */
static int64_t io_extent(const gp_plan *p, const gp_plan_tensor *t)
{
    int64_t a = p->regions[GP_REGION_IO].alignment > 0 ? p->regions[GP_REGION_IO].alignment : 1;
    return (t->size + a - 1) / a * a;
}

/* The inputs at launch sizes `at`, copied into pin_in where the one copy carries them. */
void gp_cuda_be_stage_inputs(cuda_be *b, const int64_t *at)
{
    for (int k = 0; k < b->n_io_in; k++) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_in[k]];
        memcpy(b->pin_in + b->io_hdr + t->offset, b->host_io + t->offset, used_bytes(t, at));
    }
}

/* The sizes and the inputs: with in_span, one copy of pin_in's bytes from the sizes to the last
 * input's last used byte; else a copy of the sizes and one per input. */
int gp_cuda_be_copy_inputs(cuda_be *b, const unsigned char *hio, char *err, size_t err_len)
{
    size_t nsym = sizeof(int64_t) * (size_t)b->p->n_syms, end = 0;
    for (int k = 0; k < b->n_io_in; k++) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_in[k]];
        size_t used = used_bytes(t, b->launch);
        if (!b->in_span)
            CU_TRY(copy(b, b->dev[GP_REGION_IO] + t->offset, hio + t->offset, used,
                        cudaMemcpyHostToDevice, 0));
        else if ((size_t)t->offset + used > end)
            end = (size_t)t->offset + used;
    }
    if (nsym + end > 0)
        CU_TRY(copy(b, b->dev[GP_REGION_IO] - nsym, b->pin_syms, nsym + end,
                    cudaMemcpyHostToDevice, end > 0 && (nsym > 0 || b->n_io_in > 1)));
    return 0;
fail:
    return -1;
}

/* 1 when output `id` reaches the host without a copy: argmax_copy's input or output. */
static int on_host(const cuda_be *b, int id)
{
    const gp_plan_node *nd = b->argmax_now ? &b->p->nodes[b->argmax_copy] : NULL;
    return nd && (id == nd->inputs[0] || id == nd->output);
}

/* 1 when io_out[k] may join the copy of io_out[k - 1] whose bytes end at `end`: both in io, it
 * copied, and the gap between them io_out[k - 1]'s unused rows and padding, COPY_GAP at most. */
static int joins_copy(const cuda_be *b, int k, size_t end)
{
    const gp_plan_tensor *prev = &b->p->tensors[b->io_out[k - 1]];
    const gp_plan_tensor *u = &b->p->tensors[b->io_out[k]];
    return !(b->disable & FUSE_COPIES) && !on_host(b, b->io_out[k]) &&
           prev->region == GP_REGION_IO && u->region == GP_REGION_IO && (size_t)u->offset >= end &&
           (size_t)u->offset - end <= COPY_GAP && u->offset <= prev->offset + io_extent(b->p, prev);
}

/* Rank 0's outputs (runtime/backend.h, "Several devices": the others' are the same bytes, so
 * they stay on their devices), by offset: a run of them in one copy when "copies" is on. */
int gp_cuda_be_copy_outputs(cuda_be *b, unsigned char *hio, char *err, size_t err_len)
{
    for (int k = 0, n; k < b->n_io_out && b->rank == 0; k += n) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_out[k]];
        n = 1;
        if (on_host(b, b->io_out[k]))
            continue;
        size_t start = (size_t)t->offset, end = start + used_bytes(t, b->launch);
        for (; k + n < b->n_io_out && joins_copy(b, k + n, end); n++) {
            const gp_plan_tensor *u = &b->p->tensors[b->io_out[k + n]];
            end = (size_t)u->offset + used_bytes(u, b->launch);
        }
        CU_TRY(copy(b, hio + start, tensor_addr(b, t), end - start, cudaMemcpyDeviceToHost,
                    n > 1));
    }
    return 0;
fail:
    return -1;
}

/* io_in (the inputs, in tensor order), io_out (the outputs, by region and offset), and, with
 * "copies" on, in_span when the inputs are io's first bytes with no other tensor among them. */
int gp_cuda_be_plan_copies(cuda_be *b, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    int64_t end = 0, covered = 0, first = -1;
    b->io_in = malloc(sizeof(int) * (size_t)(p->n_tensors + 1));
    b->io_out = malloc(sizeof(int) * (size_t)(p->n_tensors + 1));
    if (!b->io_in || !b->io_out) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_INPUT && t->view_src < 0 && t->size > 0) {
            b->io_in[b->n_io_in++] = i;
            end = t->offset + io_extent(p, t) > end ? t->offset + io_extent(p, t) : end;
            covered += io_extent(p, t);
            first = first < 0 || t->offset < first ? t->offset : first;
        } else if (t->kind == GP_TENSOR_OUTPUT && t->size > 0) {
            int k = b->n_io_out++; /* insertion sort by region, then offset */
            for (; k > 0; k--) {
                const gp_plan_tensor *u = &p->tensors[b->io_out[k - 1]];
                if (u->region < t->region || (u->region == t->region && u->offset <= t->offset))
                    break;
                b->io_out[k] = b->io_out[k - 1];
            }
            b->io_out[k] = i;
        }
    }
    /* The inputs' extents, starting at 0 and adding up to end, leave no room in [0, end) for
     * another tensor when io tensors do not overlap (the planner's plans); in any plan, the one
     * copy writes only bytes of the device's io region. */
    b->in_span = !(b->disable & FUSE_COPIES) && first == 0 && covered == end ? end : 0;
    return 0;
}

/* 1 when this eval's final argmax (argmax_copy) writes its input and output to the host itself:
 * its input at the launch sizes is at most ARGMAX_COPY_MAX bytes. */
int gp_cuda_be_argmax_direct(const cuda_be *b)
{
    const gp_plan *p = b->p;
    return b->argmax_copy >= 0 &&
           used_bytes(&p->tensors[p->nodes[b->argmax_copy].inputs[0]], b->launch) <=
               ARGMAX_COPY_MAX;
}
