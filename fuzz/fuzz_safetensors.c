/* Fuzz target: safetensors files (header JSON, dtypes, shapes, offsets) through gp_st_open and the
 * checkpoint layer (gp_weights_open/check/read). An input starting with '{' is instead a
 * model.safetensors.index.json, opened from a folder holding one fixed shard, "a.safetensors". */
#define _GNU_SOURCE /* memfd_create */
#include <string.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "fuzz/fuzz_memfd.h"
#include "weights/weights.h"

/* Supported tensors up to this many bytes are read (converted to f32) in full. */
enum { READ_MAX_BYTES = 1 << 20 };

static char index_dir[64];   /* the folder for index inputs, made once */
static char index_path[128]; /* index_dir/model.safetensors.index.json */

static void remove_index_dir(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/a.safetensors", index_dir);
    unlink(p);
    unlink(index_path);
    rmdir(index_dir);
}

/* The folder and its shard: "x" f32 [2] and "y" f16 [3]. */
static int make_index_dir(void)
{
    if (index_dir[0])
        return 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(index_dir, sizeof index_dir, "%s/gpfuzzXXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(index_dir))
        return -1;
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", index_dir);
    atexit(remove_index_dir);
    float x[2] = {1.0f, 2.0f};
    uint16_t y[3] = {0x3c00, 0x4000, 0x4200};
    gp_st_tensor t[2] = {
        {.name = "x", .dtype = GP_F32, .ndim = 1, .shape = {2}, .data = x, .nbytes = sizeof x},
        {.name = "y", .dtype = GP_F16, .ndim = 1, .shape = {3}, .data = y, .nbytes = sizeof y},
    };
    char p[128], err[256];
    snprintf(p, sizeof p, "%s/a.safetensors", index_dir);
    return gp_st_write(p, t, 2, NULL, err, sizeof err);
}

/* Everything a caller may do with an opened checkpoint. */
static void use_weights(gp_weights *w)
{
    int n = gp_weights_count(w);
    gp_weight_decl *decls = calloc((size_t)(n ? n : 1), sizeof *decls);
    unsigned char *convert = calloc((size_t)(n ? n : 1), 1);
    char err[2048];
    GP_FUZZ_CHECK(decls && convert);
    int n_decls = 0;
    const gp_st_tensor *prev = NULL;
    for (int i = 0; i < n; i++) {
        const gp_st_tensor *t = gp_weights_get(w, i);
        GP_FUZZ_CHECK(t && gp_weights_find(w, t->name) == t);
        GP_FUZZ_CHECK(!prev || strcmp(prev->name, t->name) < 0); /* name order, unique */
        prev = t;
        if (!t->supported)
            continue;
        decls[n_decls++] = (gp_weight_decl){t->name, t->dtype, t->ndim,
                                            {t->shape[0], t->shape[1], t->shape[2], t->shape[3]}};
        int64_t numel = gp_st_numel(t);
        GP_FUZZ_CHECK(numel >= 0 && (size_t)numel * gp_dtype_size(t->dtype) == t->nbytes);
        if (numel * 4 <= READ_MAX_BYTES) {
            float *dst = malloc((size_t)(numel ? numel : 1) * 4);
            GP_FUZZ_CHECK(dst != NULL);
            int rc = gp_weights_read(t, t->dtype == GP_I32 ? GP_I32 : GP_F32, dst,
                                     (size_t)numel * 4, err, sizeof err);
            GP_FUZZ_CHECK(rc == 0);
            free(dst);
        }
    }
    GP_FUZZ_CHECK(gp_weights_check(w, decls, n_decls, convert, err, sizeof err) == 0);
    GP_FUZZ_CHECK(gp_weights_find(w, "\x01no such tensor") == NULL);
    if (n_decls > 0) {
        /* A wrong shape and a missing name are both reported. */
        decls[0].shape[0] += 1;
        if (decls[0].ndim == 0)
            decls[0].ndim = 1;
        decls[n_decls - 1].name = "\x01no such tensor";
        GP_FUZZ_CHECK(gp_weights_check(w, decls, n_decls, convert, err, sizeof err) > 0);
    }
    free(decls);
    free(convert);
}

static void fuzz_index(const uint8_t *data, size_t size)
{
    if (make_index_dir() != 0)
        return;
    FILE *f = fopen(index_path, "wb");
    if (!f)
        return;
    fwrite(data, 1, size, f);
    fclose(f);
    char err[1024];
    gp_weights *w = gp_weights_open(index_dir, err, sizeof err);
    if (w)
        use_weights(w);
    gp_weights_close(w);
}

static void fuzz_file(const uint8_t *data, size_t size)
{
    char path[64], err[1024];
    int whole;
    int fd = gp_fuzz_memfd("fuzz.safetensors", data, size, path, sizeof path, &whole);
    if (fd < 0)
        return;
    if (whole) {
        gp_st_file *f = gp_st_open(path, err, sizeof err);
        GP_FUZZ_CHECK(f || strstr(err, path) == err);
        if (f) {
            for (int i = 0; i < gp_st_count(f); i++)
                GP_FUZZ_CHECK(gp_st_find(f, gp_st_get(f, i)->name) == gp_st_get(f, i));
            GP_FUZZ_CHECK(gp_st_get(f, gp_st_count(f)) == NULL);
            (void)gp_st_metadata(f, "format");
        }
        gp_st_close(f);
        gp_weights *w = gp_weights_open(path, err, sizeof err);
        /* gp_weights_open also takes a GGUF file (by its magic), which gp_st_open refuses. */
        int gguf = size >= 4 && memcmp(data, "GGUF", 4) == 0;
        GP_FUZZ_CHECK(gguf || (w != NULL) == (f != NULL));
        if (w)
            use_weights(w);
        gp_weights_close(w);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == '{')
        fuzz_index(data, size);
    else
        fuzz_file(data, size);
    return 0;
}
