"""Our Triton KDA kernels.

Only the options are imported here: modules that define @triton.jit kernels (`recurrent`, ...) are imported
by the caller after `kda_trace.platform.ensure_triton_can_run(device)` has chosen compiled or interpreted.
"""

from kda_trace.kernels.options import KDAOptions

__all__ = ["KDAOptions"]
