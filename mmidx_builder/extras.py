"""Optional extras (torch), imported on first use with an error that says how to get them."""

from __future__ import annotations

TORCH_EXTRA = "mmidx-builder[torch]"


def require_torch(what: str):
    """The torch module, or ImportError naming the extra to install."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(f"{what} needs PyTorch, which is not installed here ({error}); "
                          f"install it with: pip install '{TORCH_EXTRA}'") from error
    return torch
