"""ctypes bindings to the few CUDA driver calls the copy path needs (no cuda-python dependency).

- `cuMemcpyBatchAsync` (CUDA >= 12.8): one call enqueues a whole batch of pointer-to-pointer copies on a stream.
  Resolved through `cuGetProcAddress` at ABI version 12080, whose signature carries `failIdx`; CUDA 13 headers map
  the name to a `_v2` ABI without it, so asking for the 12.8 ABI explicitly keeps one signature everywhere.
- `cuMemcpyAsync`: the fallback, one call per descriptor, when the batched entry point is missing.
Unified addressing lets both take host (pinned) and device pointers alike and infer the direction.
- `cuMemHostRegister` / `cuMemHostUnregister`: pin the host mirrors. Through the driver, a failure is a return
  code and nothing else; the runtime's `cudaHostRegister` (torch's binding) leaves the runtime's last error set,
  and the next torch kernel launch then reports that stale error as its own.
- `cuDriverGetVersion`: what gpu_check.json records (e.g. 12080 for 12.8).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from dataclasses import dataclass

# CUmemcpySrcAccessOrder
SRC_ACCESS_ORDER_STREAM = 1  # the source may still be written by earlier work on the stream: read in order
SRC_ACCESS_ORDER_ANY = 3  # the source is stable (host mirror rows pinned by the scheduler): any order
# CUmemcpyFlags
MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE = 0x1
# cuMemHostRegister flags: portable (pinned for every context), device-mapped (kernels may address it).
MEMHOSTREGISTER_PORTABLE = 0x1
MEMHOSTREGISTER_DEVICEMAP = 0x2
_BATCH_ABI_VERSION = 12080


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", CUmemLocation),  # hints only matter for managed memory; left zero
        ("dstLocHint", CUmemLocation),
        ("flags", ctypes.c_uint),
    ]


class CudaDriverError(RuntimeError):
    """A driver call returned an error code."""


@dataclass(frozen=True)
class DriverCalls:
    memcpy_batch_async: object | None  # None: not available (driver older than 12.8)
    memcpy_async: object
    host_register: object
    host_unregister: object
    get_version: object
    get_error_name: object
    ctx_get_current: object

    def batch(
        self,
        dsts: int,
        srcs: int,
        sizes: int,
        count: int,
        src_access_order: int,
        stream: int,
        flags: int = MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE,
    ) -> None:
        """Enqueue `count` copies (arrays of uint64 addresses/sizes at the given host addresses) on `stream`."""
        attrs = CUmemcpyAttributes(srcAccessOrder=src_access_order, flags=flags)
        attr_index = ctypes.c_size_t(0)
        fail_index = ctypes.c_size_t(0)
        rc = self.memcpy_batch_async(
            dsts,
            srcs,
            sizes,
            ctypes.c_size_t(count),
            ctypes.byref(attrs),
            ctypes.byref(attr_index),
            ctypes.c_size_t(1),
            ctypes.byref(fail_index),
            ctypes.c_void_p(stream),
        )
        if rc != 0:
            raise CudaDriverError(f"cuMemcpyBatchAsync: CUresult {rc} at descriptor {fail_index.value} of {count}")

    def one(self, dst: int, src: int, size: int, stream: int) -> None:
        rc = self.memcpy_async(
            ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(size), ctypes.c_void_p(stream)
        )
        if rc != 0:
            raise CudaDriverError(f"cuMemcpyAsync: CUresult {rc} ({size} bytes)")

    def error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        if self.get_error_name(rc, ctypes.byref(name)) != 0 or not name.value:
            return f"CUresult {rc}"
        return f"{name.value.decode()} ({rc})"

    def register_host(
        self, ptr: int, size: int, flags: int = MEMHOSTREGISTER_PORTABLE | MEMHOSTREGISTER_DEVICEMAP
    ) -> None:
        """Page-lock `size` bytes at `ptr`; needs a current context (the caller's torch device makes one)."""
        ctx = ctypes.c_void_p()
        if self.ctx_get_current(ctypes.byref(ctx)) != 0 or not ctx.value:
            raise CudaDriverError("cuMemHostRegister: no current CUDA context on this thread")
        rc = self.host_register(ctypes.c_void_p(ptr), ctypes.c_size_t(size), ctypes.c_uint(flags))
        if rc != 0:
            raise CudaDriverError(f"cuMemHostRegister: {self.error_name(rc)} ({size} bytes)")

    def unregister_host(self, ptr: int) -> None:
        rc = self.host_unregister(ctypes.c_void_p(ptr))
        if rc != 0:
            raise CudaDriverError(f"cuMemHostUnregister: {self.error_name(rc)}")

    def version(self) -> int:
        """The driver's CUDA version, 1000 * major + 10 * minor (12080 is 12.8)."""
        value = ctypes.c_int(0)
        rc = self.get_version(ctypes.byref(value))
        if rc != 0:
            raise CudaDriverError(f"cuDriverGetVersion: {self.error_name(rc)}")
        return value.value


def _bind(lib: ctypes.CDLL, name: str, argtypes: list) -> object:
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


@functools.lru_cache(maxsize=1)
def driver_calls() -> DriverCalls:
    """Resolve the entry points once; raises `CudaDriverError` when libcuda itself cannot be loaded."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        raise CudaDriverError(f"cannot load the CUDA driver library {name}: {exc}") from exc
    vp = ctypes.c_void_p
    return DriverCalls(
        memcpy_batch_async=_resolve_batch(lib),
        memcpy_async=_bind(lib, "cuMemcpyAsync", [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, vp]),
        host_register=_bind(lib, "cuMemHostRegister_v2", [vp, ctypes.c_size_t, ctypes.c_uint]),
        host_unregister=_bind(lib, "cuMemHostUnregister", [vp]),
        get_version=_bind(lib, "cuDriverGetVersion", [ctypes.POINTER(ctypes.c_int)]),
        get_error_name=_bind(lib, "cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
        ctx_get_current=_bind(lib, "cuCtxGetCurrent", [ctypes.POINTER(vp)]),
    )


def _resolve_batch(lib: ctypes.CDLL) -> object | None:
    pfn = ctypes.c_void_p()
    try:
        get_proc = lib.cuGetProcAddress_v2  # CUDA 12.0+: (symbol, pfn, version, flags, status*)
        get_proc.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_void_p,
        ]
        get_proc.restype = ctypes.c_int
        status = ctypes.c_int(0)
        rc = get_proc(b"cuMemcpyBatchAsync", ctypes.byref(pfn), _BATCH_ABI_VERSION, 0, ctypes.byref(status))
    except AttributeError:
        return None
    if rc != 0 or not pfn.value:
        return None
    prototype = ctypes.CFUNCTYPE(
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,  # dsts, srcs, sizes, count
        ctypes.POINTER(CUmemcpyAttributes),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_size_t,  # attrs, idxs, num
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,  # failIdx, stream
    )
    return prototype(pfn.value)
