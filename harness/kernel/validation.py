"""Input checks for the method hooks: errors name the argument, the expected shape and what was given."""

from __future__ import annotations

from harness.kernel.lazy import lazy_import

torch = lazy_import("torch")


def _tensor(name: str, x) -> torch.Tensor:
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_mask(mask, name: str = "mask") -> torch.Tensor:
    mask = _tensor(name, mask)
    if mask.dim() != 2:
        raise ValueError(f"{name} must be 2-D (B, T), got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool and mask.numel():
        # values in [0, 1] whose sum equals the count of non-zeros are exactly 0/1 (one min/max pass + two sums)
        low, high = torch.aminmax(mask.detach())
        exact = torch.float32 if mask.numel() < 2**24 else torch.float64  # integer sums stay exact
        if not (
            float(low) >= 0
            and float(high) <= 1
            and float(mask.detach().sum(dtype=exact)) == float(torch.count_nonzero(mask))
        ):
            raise ValueError(f"{name} must hold only 0/1 (or bool) values")
    return mask


def check_token_tensor(name: str, x, mask: torch.Tensor, *, float_only: bool = True) -> torch.Tensor:
    """(B, T) like ``mask``, floating point, finite on the valid tokens (padding may hold anything)."""
    x = _tensor(name, x)
    if tuple(x.shape) != tuple(mask.shape):
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but mask has shape {tuple(mask.shape)}; "
            f"all token tensors must be (B, T) = {tuple(mask.shape)}"
        )
    if float_only and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    bad = ~torch.isfinite(x.detach()) & mask.bool()
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} has a non-finite value (NaN or inf) on a valid token, first at [{b}, {t}] "
            f"({int(bad.sum())} in all)"
        )
    return x


SIGN_TOLERANCE = 1e-2  # bf16/fp16 rounding of a log-prob near 0 or an entropy near 0 stays well inside this


def valid_tokens(name: str, x, valid: torch.Tensor, padded: bool = True, sign: int = 0) -> torch.Tensor:
    """A (B,T) float input as the losses use it: at least float32 and 0 on padding (which may hold anything;
    ``padded=False``: there is none); one finiteness pass, whose failure names the first non-finite valid token.
    ``sign=1``: an entropy (>= 0, up to ``SIGN_TOLERANCE``; a negated entropy would train silently); ``sign=-1``:
    a log-probability (<= 0; the method API does not ask it: its losses read log-probs as log-ratios)."""
    x = _tensor(name, x)
    if tuple(x.shape) != tuple(valid.shape):
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but mask has shape {tuple(valid.shape)}; "
            f"all token tensors must be (B, T) = {tuple(valid.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if padded:
        x = x.masked_fill(~valid, 0.0)
    if not bool(torch.isfinite(x.detach().sum())):  # a NaN/inf on a valid token (or an overflowing sum)
        check_token_tensor(name, x, valid)  # raises, naming the first bad token
    if sign and bool((sign * x.detach() < -SIGN_TOLERANCE).any()):
        bad = (sign * x.detach() < -SIGN_TOLERANCE) & valid
        b, t = (int(i) for i in bad.nonzero()[0])
        what = "a log-probability must be <= 0" if sign < 0 else "an entropy must be >= 0"
        raise ValueError(
            f"{name}[{b}, {t}] = {float(x.detach()[b, t]):.4g}: {what} ({int(bad.sum())} tokens break it; passed "
            f"{'probabilities or negated log-probs' if sign < 0 else 'a negated entropy'}?)"
        )
    return x


def check_sample_tensor(name: str, x, batch: int) -> torch.Tensor:
    x = _tensor(name, x)
    if x.dim() != 1 or x.shape[0] != batch:
        raise ValueError(f"{name} must be 1-D with one entry per response (B={batch}), got shape {tuple(x.shape)}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(
            f"{name} has a non-finite value (NaN or inf) at index {int((~torch.isfinite(x)).nonzero()[0])}"
        )
    return x


def check_group_ids(group_ids, batch: int):
    if torch.is_tensor(group_ids):
        if group_ids.dim() != 1 or group_ids.shape[0] != batch:
            raise ValueError(
                f"group_ids must be 1-D with one entry per response (B={batch}), got shape {tuple(group_ids.shape)}"
            )
        if group_ids.is_floating_point():
            raise TypeError(f"group_ids must be integer ids, got {group_ids.dtype}")
        return group_ids
    group_ids = list(group_ids)
    if len(group_ids) != batch:
        raise ValueError(f"group_ids must have one entry per response (B={batch}), got {len(group_ids)}")
    return group_ids
