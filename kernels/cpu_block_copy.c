/* Batched host memcpy for the CPU copy backend (loaded by toolkit/copy/native.py through ctypes).
 *
 * Why native: torch has no single-pass gather->scatter between two [num_blocks, block_bytes] buffers
 * (index_select + index_copy_ is two passes and int8 index_select is slow), and a Python loop of slice copies
 * costs microseconds per block, more than copying a 4 KiB block. One call here runs a whole batch of
 * (src address, dst address, bytes) descriptors, like cuMemcpyBatchAsync does on a GPU.
 *
 * The caller (descriptors.py) has already bounds-checked every block id; this file trusts its input.
 * ctypes releases the GIL around the call, so copies overlap Python work on other threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const int64_t *src;
    const int64_t *dst;
    const int64_t *sizes;
    int64_t count;
    int64_t begin_byte; /* this worker's slice of the batch, in bytes over all descriptors in order */
    int64_t end_byte;
} kvtk_slice;

/* glibc's memcpy switches to non-temporal stores for large sizes, which measured at less than half the rate of
 * torch's own copy loop here; a plain 64-byte-chunk loop (inlined vector moves) matches it. */
static void copy_bytes(char *dst, const char *src, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) __builtin_memcpy(dst + i, src + i, 64);
    if (i < n) memcpy(dst + i, src + i, (size_t)(n - i));
}

/* Copy bytes [begin_byte, end_byte) of the concatenation of all descriptors; splitting inside a descriptor lets
 * one large run use every thread. */
static void copy_slice(const kvtk_slice *s) {
    int64_t pos = 0;
    for (int64_t i = 0; i < s->count && pos < s->end_byte; ++i) {
        int64_t size = s->sizes[i];
        int64_t lo = s->begin_byte > pos ? s->begin_byte - pos : 0;
        int64_t hi = s->end_byte < pos + size ? s->end_byte - pos : size;
        if (hi > lo) {
            copy_bytes((char *)(intptr_t)s->dst[i] + lo, (const char *)(intptr_t)s->src[i] + lo, hi - lo);
        }
        pos += size;
    }
}

static void *copy_slice_thread(void *arg) {
    copy_slice((const kvtk_slice *)arg);
    return NULL;
}

#define KVTK_MAX_THREADS 64

/* Returns 0 on success. num_threads <= 1 copies on the calling thread only. */
int kvtk_copy_batch(const int64_t *src, const int64_t *dst, const int64_t *sizes, int64_t count, int num_threads) {
    int64_t total = 0;
    for (int64_t i = 0; i < count; ++i) total += sizes[i];
    if (num_threads > KVTK_MAX_THREADS) num_threads = KVTK_MAX_THREADS;
    /* Thread start-up costs tens of microseconds: not worth it below ~1 MiB per extra thread. */
    while (num_threads > 1 && total / num_threads < (1 << 20)) --num_threads;
    if (num_threads < 1) num_threads = 1;

    kvtk_slice slices[KVTK_MAX_THREADS];
    pthread_t threads[KVTK_MAX_THREADS];
    int started[KVTK_MAX_THREADS];
    int64_t per = total / num_threads;
    for (int t = 0; t < num_threads; ++t) {
        slices[t].src = src;
        slices[t].dst = dst;
        slices[t].sizes = sizes;
        slices[t].count = count;
        slices[t].begin_byte = per * t;
        slices[t].end_byte = t == num_threads - 1 ? total : per * (t + 1);
        started[t] = 0;
    }
    for (int t = 1; t < num_threads; ++t) {
        started[t] = pthread_create(&threads[t], NULL, copy_slice_thread, &slices[t]) == 0;
    }
    copy_slice(&slices[0]);
    for (int t = 1; t < num_threads; ++t) {
        if (started[t]) {
            pthread_join(threads[t], NULL);
        } else {
            copy_slice(&slices[t]); /* could not start a thread: do its share here */
        }
    }
    return 0;
}
