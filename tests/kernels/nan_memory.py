"""A test helper: `torch.empty` that hands out NaN-filled floating-point memory, so that a kernel reading what
no kernel wrote shows up as NaN instead of passing on whatever the allocator left there (often zeros)."""

from __future__ import annotations

import contextlib

import pytest
import torch


@contextlib.contextmanager
def nan_filled_empty():
    """Within the block every floating-point tensor from `torch.empty` starts as NaN (others as allocated)."""
    real_empty = torch.empty

    def nan_empty(*a, **k):
        t = real_empty(*a, **k)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "empty", nan_empty)
        yield
