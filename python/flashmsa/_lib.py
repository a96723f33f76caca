"""ctypes binding of the C ABI in include/flashmsa/flashmsa.h.

The library is found through the FLASHMSA_LIBRARY environment variable (a path to
libflashmsa.so, e.g. a development build), else it is the libflashmsa.so installed next to this
module by `pip install .`. It is loaded on first use, so `import flashmsa` (and
flashmsa.patterns) works on a machine where the library is not built yet.
"""
import ctypes
import os
import threading

ABI_VERSION = 3

# flashmsa_status
OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_NOT_SUPPORTED = 2
ERROR_CUDA = 3
ERROR_INTERNAL = 4

# flashmsa_dtype
DTYPE_BF16 = 0
DTYPE_FP16 = 1
DTYPE_FP8_E4M3 = 2
DTYPE_NVFP4 = 3

# flashmsa_device
DEVICE_CPU = 0
DEVICE_CUDA = 1

# flashmsa_q_offset_mode
Q_OFFSET_END_ALIGNED = 0
Q_OFFSET_SCALAR = 1
Q_OFFSET_PER_REQUEST = 2

# flashmsa_nvfp4_scale_layout
NVFP4_SCALES_SWIZZLED = 0
NVFP4_SCALES_PAGE_LOCAL = 1

_enum = ctypes.c_int  # C enums with small values are int-sized on every ABI we target
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


class Args(ctypes.Structure):
    """flashmsa_args, field by field in the header's order (tests/python/test_ctypes_layout.py
    compiles the header and compares every offset)."""

    _fields_ = [
        ("device", _enum),
        ("device_index", _i32),
        ("stream", _ptr),
        ("batch_size", _i64),
        ("total_q", _i64),
        ("num_qo_heads", _i64),
        ("num_kv_heads", _i64),
        ("head_dim", _i64),
        ("topk", _i64),
        ("is_paged", _i32),
        ("total_k", _i64),
        ("num_pages", _i64),
        ("max_pages_per_request", _i64),
        ("q_dtype", _enum),
        ("kv_dtype", _enum),
        ("q", _ptr),
        ("q_stride_token", _i64),
        ("q_stride_head", _i64),
        ("k", _ptr),
        ("k_stride_page", _i64),
        ("k_stride_head", _i64),
        ("k_stride_token", _i64),
        ("v", _ptr),
        ("v_stride_page", _i64),
        ("v_stride_head", _i64),
        ("v_stride_token", _i64),
        ("k_scale", _ptr),
        ("k_scale_bytes", _i64),
        ("v_scale", _ptr),
        ("v_scale_bytes", _i64),
        ("q2k_indices", _ptr),
        ("idx_stride_head", _i64),
        ("idx_stride_token", _i64),
        ("idx_stride_topk", _i64),
        ("cu_seqlens_q", _ptr),
        ("cu_seqlens_k", _ptr),
        ("seqused_k", _ptr),
        ("page_table", _ptr),
        ("page_table_stride_batch", _i64),
        ("page_table_stride_page", _i64),
        ("causal", _i32),
        ("q_offset_mode", _enum),
        ("q_offset_value", _i64),
        ("q_offset_per_request", _ptr),
        ("softmax_scale", ctypes.c_float),
        ("k_global_scale", ctypes.c_float),
        ("v_global_scale", ctypes.c_float),
        ("lse_temperature_scale", ctypes.c_float),
        ("out", _ptr),
        ("out_stride_token", _i64),
        ("out_stride_head", _i64),
        ("lse", _ptr),
        ("lse_stride_token", _i64),
        ("lse_stride_head", _i64),
        ("lse_t", _ptr),
        ("lse_t_stride_token", _i64),
        ("lse_t_stride_head", _i64),
        ("workspace", _ptr),
        ("workspace_bytes", ctypes.c_size_t),
        ("k_global_scale_device", _ptr),
        ("v_global_scale_device", _ptr),
        ("nvfp4_scale_layout", _enum),
        ("k_scale_stride_page", _i64),
        ("k_scale_stride_head", _i64),
        ("v_scale_stride_page", _i64),
        ("v_scale_stride_head", _i64),
        ("k_token_scale", _ptr),
        ("k_token_scale_stride_head", _i64),
        ("k_token_scale_slots", _i64),
        ("v_token_scale", _ptr),
        ("v_token_scale_stride_head", _i64),
        ("v_token_scale_slots", _i64),
        ("causal_entry_limit", ctypes.c_int32),
    ]


class Tuning(ctypes.Structure):
    """flashmsa_tuning (include/flashmsa/flashmsa_testing.h), test-only: each field overrides one
    decision of the launch plan; -1 (FLASHMSA_TUNING_DEFAULT) leaves it to the plan."""

    _fields_ = [(name, _i32) for name in (
        "splits", "decode_kernel", "one_consumer", "tiles_outer", "evict_first", "l2_promotion",
        "speculate", "deep_pipeline", "ctas_per_sm", "stages", "prefill_stages", "throttle",
        "pace", "cluster", "push", "warp_plan", "token_warps")]


TUNING_DEFAULT = -1

# flashmsa_workspace_fn: void* (size_t bytes, void* context).
WorkspaceFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

_library = None
_load_lock = threading.Lock()


def library_path():
    """Where the library is looked for: $FLASHMSA_LIBRARY, else next to this module."""
    path = os.environ.get("FLASHMSA_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libflashmsa.so")


def library():
    """The loaded library, with argument and result types declared (loaded once)."""
    global _library
    if _library is not None:
        return _library
    with _load_lock:
        if _library is not None:
            return _library
        path = library_path()
        if not os.path.exists(path):
            raise RuntimeError(
                f"flashmsa: libflashmsa.so not found at {path}: install the package with "
                "`pip install .` from the repository root, or point FLASHMSA_LIBRARY at a build "
                "(e.g. build/libflashmsa.so)")
        lib = ctypes.CDLL(path)
        args_pointer = ctypes.POINTER(Args)
        lib.flashmsa_args_init.argtypes = [args_pointer]
        lib.flashmsa_args_init.restype = None
        lib.flashmsa_workspace_bytes.argtypes = [args_pointer, ctypes.POINTER(ctypes.c_size_t)]
        lib.flashmsa_workspace_bytes.restype = _enum
        lib.flashmsa_sparse_attention.argtypes = [args_pointer]
        lib.flashmsa_sparse_attention.restype = _enum
        lib.flashmsa_sparse_attention_with_workspace_fn.argtypes = [args_pointer, WorkspaceFn,
                                                                    _ptr]
        lib.flashmsa_sparse_attention_with_workspace_fn.restype = _enum
        tuning_pointer = ctypes.POINTER(Tuning)
        lib.flashmsa_tuning_init.argtypes = [tuning_pointer]
        lib.flashmsa_tuning_init.restype = None
        lib.flashmsa_sparse_attention_tuned.argtypes = [args_pointer, tuning_pointer, WorkspaceFn,
                                                        _ptr]
        lib.flashmsa_sparse_attention_tuned.restype = _enum
        lib.flashmsa_last_error.argtypes = []
        lib.flashmsa_last_error.restype = ctypes.c_char_p
        lib.flashmsa_has_cuda.argtypes = []
        lib.flashmsa_has_cuda.restype = ctypes.c_int
        lib.flashmsa_abi_version.argtypes = []
        lib.flashmsa_abi_version.restype = ctypes.c_int
        version = lib.flashmsa_abi_version()
        if version != ABI_VERSION:
            raise RuntimeError(f"flashmsa: {path} has ABI version {version}, this package "
                               f"expects {ABI_VERSION}: rebuild the library")
        _library = lib
        return lib


def new_args():
    """A flashmsa_args filled with the library's defaults."""
    args = Args()
    library().flashmsa_args_init(ctypes.byref(args))
    return args


def has_cuda():
    return bool(library().flashmsa_has_cuda())


def _raise_for(status):
    """Map a failing status to the contract's exception types, with the library's text."""
    message = library().flashmsa_last_error().decode("utf-8", "replace")
    if status == ERROR_INVALID_ARGUMENT:
        raise ValueError(message)
    if status == ERROR_NOT_SUPPORTED:
        raise NotImplementedError(message)
    if status == ERROR_CUDA:
        raise RuntimeError(f"flashmsa: CUDA error: {message}")
    raise RuntimeError(f"flashmsa: internal error (status {status}): {message}")


def sparse_attention(args):
    """The call with the scratch memory args already holds."""
    status = library().flashmsa_sparse_attention(ctypes.byref(args))
    if status != OK:
        _raise_for(status)


class _ScratchRequest(threading.local):
    """The running call's allocator, for the library's workspace callback (one per thread)."""
    allocate = None   # bytes -> tensor
    scratch = None    # the tensor handed out, kept alive until the call has launched
    error = None      # what the allocator raised


_scratch = _ScratchRequest()


@WorkspaceFn
def _workspace_fn(nbytes, _context):
    try:
        _scratch.scratch = _scratch.allocate(nbytes)
        return _scratch.scratch.data_ptr()
    except BaseException as error:  # the library turns NULL into a failed call
        _scratch.error = error
        return None


def sparse_attention_allocating(args, allocate, tuning=None):
    """The call, with scratch memory from allocate(nbytes) -> tensor when it needs any: one
    validation and one launch plan in the library. `tuning` (a Tuning) is test-only."""
    _scratch.allocate, _scratch.scratch, _scratch.error = allocate, None, None
    try:
        if tuning is None:
            status = library().flashmsa_sparse_attention_with_workspace_fn(
                ctypes.byref(args), _workspace_fn, None)
        else:
            status = library().flashmsa_sparse_attention_tuned(
                ctypes.byref(args), ctypes.byref(tuning), _workspace_fn, None)
        if _scratch.error is not None:
            raise _scratch.error
        if status != OK:
            _raise_for(status)
    finally:
        _scratch.allocate, _scratch.scratch, _scratch.error = None, None, None


def new_tuning(**overrides):
    """A Tuning with the given fields set and every other field left to the plan."""
    tuning = Tuning()
    library().flashmsa_tuning_init(ctypes.byref(tuning))
    names = {name for name, _ in Tuning._fields_}
    for name, value in overrides.items():
        if name not in names:
            raise ValueError(f"launch override {name!r}: expected one of {sorted(names)}")
        setattr(tuning, name, int(value))
    return tuning


# ---------------------------------------------------------------------------------------------
# flashmsa_merge_attention_states. Bound on first use rather than in library(), so that a
# library built before the merge existed still runs attention and the merge alone says what to do.
# ---------------------------------------------------------------------------------------------

# flashmsa_merge_dtype
MERGE_DTYPE_BF16 = 0
MERGE_DTYPE_FP16 = 1
MERGE_DTYPE_FP32 = 4


class MergeArgs(ctypes.Structure):
    """flashmsa_merge_args, field by field in the header's order
    (tests/python/test_merge_attention_states.py compares every offset with the C compiler's)."""

    _fields_ = [
        ("device", _enum),
        ("device_index", _i32),
        ("stream", _ptr),
        ("num_states", _i64),
        ("total_q", _i64),
        ("num_heads", _i64),
        ("head_dim", _i64),
        ("dtype", _enum),
        ("partial_outs", ctypes.POINTER(_ptr)),
        ("partial_out_stride_token", ctypes.POINTER(_i64)),
        ("partial_out_stride_head", ctypes.POINTER(_i64)),
        ("partial_lses", ctypes.POINTER(_ptr)),
        ("partial_lse_stride_token", ctypes.POINTER(_i64)),
        ("partial_lse_stride_head", ctypes.POINTER(_i64)),
        ("out", _ptr),
        ("out_stride_token", _i64),
        ("out_stride_head", _i64),
        ("lse", _ptr),
        ("lse_stride_token", _i64),
        ("lse_stride_head", _i64),
    ]


def merge_library():
    """The loaded library with the merge's functions declared."""
    lib = library()
    if not hasattr(lib, "flashmsa_merge_attention_states"):
        raise RuntimeError(f"flashmsa: {library_path()} has no flashmsa_merge_attention_states "
                           "(built before the merge was added): rebuild the library")
    merge_pointer = ctypes.POINTER(MergeArgs)
    # Setting the same prototypes again from another thread is harmless.
    lib.flashmsa_merge_args_init.argtypes = [merge_pointer]
    lib.flashmsa_merge_args_init.restype = None
    lib.flashmsa_merge_attention_states.argtypes = [merge_pointer]
    lib.flashmsa_merge_attention_states.restype = _enum
    return lib


def new_merge_args():
    """A flashmsa_merge_args filled with the library's defaults."""
    args = MergeArgs()
    merge_library().flashmsa_merge_args_init(ctypes.byref(args))
    return args


def merge_attention_states(args):
    """The merge; the arrays args points at must stay alive until it returns."""
    status = merge_library().flashmsa_merge_attention_states(ctypes.byref(args))
    if status != OK:
        _raise_for(status)
