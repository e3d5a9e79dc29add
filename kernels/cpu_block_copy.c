/* Batched host memcpy for the CPU copy backend (loaded by toolkit/copy/native.py through ctypes).
 *
 * Why native: torch has no single-pass gather->scatter between two [num_blocks, block_bytes] buffers
 * (index_select + index_copy_ is two passes and int8 index_select is slow), and a Python loop of slice copies
 * costs microseconds per block, more than copying a 4 KiB block. One call here runs a whole batch of
 * (src address, dst address, bytes) descriptors, like cuMemcpyBatchAsync does on a GPU.
 *
 * Two things make scattered small blocks slow next to one contiguous copy, and both are handled here:
 *  - the hardware prefetchers stop at every 4 KiB page, so each block of a random batch starts with demand misses.
 *    A software prefetch cursor runs `KVTK_PREFETCH_BYTES` ahead of the copy over the descriptor list (across
 *    descriptor boundaries), so the next blocks' source lines are in flight while this one is copied;
 *  - ordinary stores read every destination line before writing it (read-for-ownership). For batches larger
 *    than the last-level cache, non-temporal (streaming) stores skip that read and do not evict useful lines;
 *    the caller chooses the threshold (`nt_min_bytes`), since a small batch loaded into the device cache is best
 *    left in cache for the compute that follows.
 *
 * The caller (descriptors.py) has already bounds-checked every block id; this file trusts its input.
 * ctypes releases the GIL around the call, so copies overlap Python work on other threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__))
#include <immintrin.h>
#define KVTK_HAVE_NT 1
#else
#define KVTK_HAVE_NT 0
#endif

/* How far (bytes) the prefetch cursor runs ahead of the copy: a few small blocks, well inside L1+L2. */
#define KVTK_PREFETCH_BYTES (16 << 10)
/* Copy step: one prefetch cursor advance per step. */
#define KVTK_STEP 256

typedef struct {
    const int64_t *src;
    const int64_t *dst;
    const int64_t *sizes;
    int64_t count;
    int64_t begin_byte; /* this worker's slice of the batch, in bytes over all descriptors in order */
    int64_t end_byte;
    int nt;             /* non-temporal stores */
} kvtk_slice;

/* Software prefetch cursor over the source side of the descriptor list. */
typedef struct {
    const int64_t *src;
    const int64_t *sizes;
    int64_t count;
    int64_t index;
    int64_t offset;
    int64_t limit_index; /* stop at the end of this thread's slice (index, offset) */
    int64_t limit_offset;
} kvtk_cursor;

static inline void cursor_advance(kvtk_cursor *c, int64_t bytes) {
    while (bytes > 0) {
        if (c->index > c->limit_index || (c->index == c->limit_index && c->offset >= c->limit_offset)) return;
        if (c->offset >= c->sizes[c->index]) {
            ++c->index;
            c->offset = 0;
            continue;
        }
        __builtin_prefetch((const char *)(intptr_t)c->src[c->index] + c->offset, 0, 3);
        c->offset += 64;
        bytes -= 64;
    }
}

/* glibc's memcpy switches to non-temporal stores for large sizes by its own rule; a plain 64-byte-chunk loop
 * (inlined vector moves) matches torch's copy loop, and the streaming variant below is chosen explicitly. */
static inline void copy_plain(char *dst, const char *src, int64_t n, kvtk_cursor *c) {
    int64_t i = 0;
    for (; i + KVTK_STEP <= n; i += KVTK_STEP) {
        cursor_advance(c, KVTK_STEP);
        __builtin_memcpy(dst + i, src + i, KVTK_STEP);
    }
    for (; i + 64 <= n; i += 64) __builtin_memcpy(dst + i, src + i, 64);
    if (i < n) memcpy(dst + i, src + i, (size_t)(n - i));
}

#if KVTK_HAVE_NT
static inline void stream_step(char *dst, const char *src) {
#if defined(__AVX512F__)
    __m512i a = _mm512_loadu_si512((const void *)src), b = _mm512_loadu_si512((const void *)(src + 64));
    __m512i x = _mm512_loadu_si512((const void *)(src + 128)), y = _mm512_loadu_si512((const void *)(src + 192));
    _mm512_stream_si512((void *)dst, a);
    _mm512_stream_si512((void *)(dst + 64), b);
    _mm512_stream_si512((void *)(dst + 128), x);
    _mm512_stream_si512((void *)(dst + 192), y);
#elif defined(__AVX__)
    for (int k = 0; k < KVTK_STEP; k += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + k));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + k + 32));
        _mm256_stream_si256((__m256i *)(dst + k), a);
        _mm256_stream_si256((__m256i *)(dst + k + 32), b);
    }
#else
    for (int k = 0; k < KVTK_STEP; k += 16) {
        _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k)));
    }
#endif
}

static inline void copy_stream(char *dst, const char *src, int64_t n, kvtk_cursor *c) {
    int64_t head = (int64_t)((64 - ((uintptr_t)dst & 63)) & 63); /* streaming stores want aligned lines */
    if (head > n) head = n;
    if (head) memcpy(dst, src, (size_t)head);
    int64_t i = head;
    for (; i + KVTK_STEP <= n; i += KVTK_STEP) {
        cursor_advance(c, KVTK_STEP);
        stream_step(dst + i, src + i);
    }
    if (i < n) memcpy(dst + i, src + i, (size_t)(n - i));
}
#endif

/* Copy bytes [begin_byte, end_byte) of the concatenation of all descriptors; splitting inside a descriptor lets
 * one large run use every thread. */
static void copy_slice(const kvtk_slice *s) {
    /* Find where the slice starts and ends, for the prefetch cursor. */
    int64_t pos = 0, first = s->count, first_lo = 0, last = -1, last_hi = 0;
    for (int64_t i = 0; i < s->count && pos < s->end_byte; ++i) {
        int64_t size = s->sizes[i];
        if (pos + size > s->begin_byte && size > 0) {
            if (first == s->count) {
                first = i;
                first_lo = s->begin_byte - pos;
            }
            last = i;
            last_hi = s->end_byte < pos + size ? s->end_byte - pos : size;
        }
        pos += size;
    }
    if (last < 0) return;
    kvtk_cursor cursor = {s->src, s->sizes, s->count, first, first_lo & ~(int64_t)63, last, last_hi};
    cursor_advance(&cursor, KVTK_PREFETCH_BYTES);
    for (int64_t i = first; i <= last; ++i) {
        int64_t lo = i == first ? first_lo : 0;
        int64_t hi = i == last ? last_hi : s->sizes[i];
        if (hi <= lo) continue;
        char *d = (char *)(intptr_t)s->dst[i] + lo;
        const char *p = (const char *)(intptr_t)s->src[i] + lo;
#if KVTK_HAVE_NT
        if (s->nt) {
            copy_stream(d, p, hi - lo, &cursor);
            continue;
        }
#endif
        copy_plain(d, p, hi - lo, &cursor);
    }
#if KVTK_HAVE_NT
    if (s->nt) _mm_sfence(); /* streaming stores are weakly ordered: publish them before this slice reports done */
#endif
}

static void *copy_slice_thread(void *arg) {
    copy_slice((const kvtk_slice *)arg);
    return NULL;
}

#define KVTK_MAX_THREADS 64

/* Returns 0 on success. num_threads <= 1 copies on the calling thread only. Streaming stores are used when the
 * batch has at least `nt_min_bytes` bytes (negative: never) and the build supports them. */
int kvtk_copy_batch(const int64_t *src, const int64_t *dst, const int64_t *sizes, int64_t count, int num_threads,
                    int64_t nt_min_bytes) {
    int64_t total = 0;
    for (int64_t i = 0; i < count; ++i) total += sizes[i];
    if (num_threads > KVTK_MAX_THREADS) num_threads = KVTK_MAX_THREADS;
    /* Thread start-up costs tens of microseconds: not worth it below ~1 MiB per extra thread. */
    while (num_threads > 1 && total / num_threads < (1 << 20)) --num_threads;
    if (num_threads < 1) num_threads = 1;
    int nt = KVTK_HAVE_NT && nt_min_bytes >= 0 && total >= nt_min_bytes;

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
        slices[t].nt = nt;
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

/* 1 when this build can use streaming stores (for tests and the benchmark's report). */
int kvtk_copy_has_streaming_stores(void) { return KVTK_HAVE_NT; }
