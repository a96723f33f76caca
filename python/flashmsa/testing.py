"""Test-only launch overrides of the Hopper kernels.

The release path decides every launch from the arguments and the device alone. Tests that reach
the kernels' other paths, and benchmarks that sweep alternatives, override single decisions of
the launch plan inside a `launch_overrides` block; every call of msa_sparse_attention on this
thread inside it goes through the library's test-only entry point
(include/flashmsa/flashmsa_testing.h, whose flashmsa_tuning fields are the names here):

    with flashmsa.testing.launch_overrides(splits=4, deep_pipeline=1):
        out = flashmsa.msa_sparse_attention(...)

A value outside a field's range leaves the plan's own choice. Results follow the contract under
every setting; only the speed (and, for split counts, the order of the sums) differs.
"""
import contextlib
import threading

from . import _lib

FIELDS = tuple(name for name, _ in _lib.Tuning._fields_)


class _Overrides(threading.local):
    tuning = None  # a _lib.Tuning while a launch_overrides block is active on this thread


_active = _Overrides()


@contextlib.contextmanager
def launch_overrides(**fields):
    """Overrides the named decisions of the launch plan (see FIELDS) for the calls of this
    thread inside the block; blocks nest, the inner one's fields on top of the outer's."""
    outer = _active.tuning
    merged = {name: getattr(outer, name) for name in FIELDS} if outer is not None else {}
    merged.update(fields)
    _active.tuning = _lib.new_tuning(**merged)
    try:
        yield _active.tuning
    finally:
        _active.tuning = outer


def launch_overrides_in_effect():
    """The active overrides (a _lib.Tuning), or None: the release path."""
    return _active.tuning

