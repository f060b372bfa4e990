"""Unit tests: Triton's kernels run under its interpreter on CPU tensors.

Triton reads ``TRITON_INTERPRET`` when it is first imported, and other imports (transformers' models) can import
it before a kernel test module is: set here, before any test module, the kernel tests pass in any order.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
