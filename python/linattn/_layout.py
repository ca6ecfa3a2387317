"""The two layouts of 4-d attention tensors, and the one check every entry point makes of `layout=`.

"bnhd": [B, N, H, D], linattn's own (the C++ views, numpy, flash-linear-attention);
"bhnd": [B, H, N, D], torch's (F.scaled_dot_product_attention, nn.MultiheadAttention's heads).
A shape alone cannot tell them apart, so linattn never guesses: a transposition is a view (no copy),
and the kernels read any strides.
"""

LAYOUTS = {"bnhd": "[B, N, H, D]", "bhnd": "[B, H, N, D]"}


def check_layout(layout, where):
    """layout, checked; None (not given) is an error where no default can be right."""
    if layout is None:
        raise TypeError(f'{where}: layout: expected "bhnd" (torch\'s [B, H, N, D]) or "bnhd" ([B, N, H, D]), got '
                        "None; a 4-d shape does not say which, so linattn does not guess")
    if layout not in LAYOUTS:
        raise ValueError(f'{where}: layout: expected "bhnd" or "bnhd", got {layout!r}')
    return layout


def to_bnhd(x, layout):
    """x in linattn's [B, N, H, D] order: a view of x (numpy array or torch tensor), never a copy."""
    return x if x is None or layout == "bnhd" else x.swapaxes(1, 2)


from_bnhd = to_bnhd  # swapping N and H is its own inverse
