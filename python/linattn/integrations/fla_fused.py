"""Torch forms, with flash-linear-attention's parameters and semantics, of the fused Triton helpers that fla's
models (fla.models) call around their layers: the SwiGLU launchers behind GatedMLP (fused or not) and the
fused cross-entropy losses. linattn.integrations.fla.enable() routes CPU calls of fla's functions here.

Everything is computed in float32 (or wider) and returned in fla's dtypes: the losses in float32, the
activations in their input's dtype."""

import torch
import torch.nn.functional as F

__all__ = ["fla_swiglu_fwd", "fla_swiglu_fwdbwd", "fla_cross_entropy_loss", "fla_fused_cross_entropy_forward",
           "fla_fused_linear_cross_entropy_loss", "fla_layer_norm_linear"]


def _float(x):
    return x.to(torch.promote_types(x.dtype, torch.float32))


# ------------------------------------------------------------------------------------------------
# SwiGLU: z = swish(x)·y. fla's SwiGLUFunction and SwiGLULinearFunction (GatedMLP with and without
# fuse_swiglu) call these two launchers, forward and backward.


def fla_swiglu_fwd(x, y, output_contiguous=False):
    """fla.modules.activations' swiglu_fwd: x·sigmoid(x)·y, in x's dtype."""
    if x.shape != y.shape:
        raise ValueError(f"swiglu_fwd: x {tuple(x.shape)} and y {tuple(y.shape)} must have the same shape")
    return (F.silu(_float(x)) * _float(y)).to(x.dtype)


def fla_swiglu_fwdbwd(x, y, g, use_weight=False, output_contiguous=False):
    """fla.modules.activations' swiglu_fwdbwd: the gradients (dx, dy) of swish(x)·y given g, the gradient of
    its output, and with use_weight also the forward output z (what SwiGLULinear's weight gradient needs)."""
    if not x.shape == y.shape == g.shape:
        raise ValueError(f"swiglu_fwdbwd: x {tuple(x.shape)}, y {tuple(y.shape)} and g {tuple(g.shape)} must have "
                         "the same shape")
    xf, yf, gf = _float(x), _float(y), _float(g)
    s = torch.sigmoid(xf)
    swish = xf * s
    dx = (gf * yf * s * (1 + xf * (1 - s))).to(x.dtype)
    dy = (gf * swish).to(y.dtype)
    if use_weight:
        return dx, dy, (swish * yf).to(x.dtype)
    return dx, dy


# ------------------------------------------------------------------------------------------------
# Cross entropy. fla's loss per row n with target t (logits ℓ of V classes, after scaling and softcapping):
#   loss_n = lse_n - (1 - s)·ℓ_t - s·Σ_v ℓ_v / V + z·lse_n²,   z_loss_n = z·lse_n²
# (s the label smoothing, z lse_square_scale), and 0 for both where t is ignore_index. Autograd gives the
# gradient fla's backward kernel computes.


def _single_process(process_group):
    if process_group is not None:
        raise ValueError("process_group: linattn's CPU cross entropy computes on one process only; pass "
                         "process_group=None (or shard the vocabulary on a GPU with fla's own kernels)")


def fla_cross_entropy_loss(logits, target, label_smoothing=0.0, logit_scale=1.0, lse_square_scale=0.0,
                           logit_softcapping=None, ignore_index=-100, inplace_backward=False, process_group=None):
    """fla.modules.fused_cross_entropy's cross_entropy_loss: (loss [N], z_loss [N]) in float32 from logits
    [N, V] and target [N]; the loss includes the z-loss, z_loss carries no gradient. inplace_backward (fla's
    memory saving: the gradient overwrites logits) changes nothing here."""
    _single_process(process_group)
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy_loss: expected logits [N, V] and target [N], got logits "
                         f"{tuple(logits.shape)} and target {tuple(target.shape)}")
    scaled = _float(logits) * logit_scale
    if logit_softcapping is not None:
        scaled = logit_softcapping * torch.tanh(scaled / logit_softcapping)
    lse = torch.logsumexp(scaled, dim=-1)
    kept = target != ignore_index
    picked = scaled.gather(-1, torch.where(kept, target, 0).long().unsqueeze(-1)).squeeze(-1)
    if label_smoothing > 0:
        picked = (1 - label_smoothing) * picked + label_smoothing * scaled.sum(-1) / scaled.shape[-1]
    z_loss = lse_square_scale * lse.square()
    zero = scaled.new_zeros(())
    loss = torch.where(kept, lse - picked + z_loss, zero)
    return loss, torch.where(kept, z_loss, zero).detach()


def fla_fused_cross_entropy_forward(module, input, target):
    """fla's FusedCrossEntropyLoss.forward (module: the loss, with its options) on CPU tensors: the rows'
    losses of fla_cross_entropy_loss, summed or averaged over the targets that are not ignore_index
    (reduction "mean", "sum" or "none"), with the z-loss too where the module returns it."""
    loss, z_loss = fla_cross_entropy_loss(input, target, module.label_smoothing, module.logit_scale,
                                          module.lse_square_scale, module.logit_softcapping, module.ignore_index,
                                          module.inplace_backward, module.process_group)
    if module.reduction != "none":
        loss, z_loss = loss.sum(), z_loss.sum()
        if module.reduction == "mean":
            total = (target != module.ignore_index).sum()  # as fla: no target kept gives 0/0
            loss, z_loss = loss / total, z_loss / total
    return (loss, z_loss) if module.return_z_loss else loss


def fla_fused_linear_cross_entropy_loss(x, target, weight, bias=None, ignore_index=-100, label_smoothing=0.0,
                                        logit_scale=1.0, logit_softcapping=None, num_chunks=8, reduction="mean",
                                        use_l2warp=False, l2_penalty_factor=1e-4, accumulate_grad_in_fp32=True,
                                        process_group=None):
    """fla.modules.fused_linear_cross_entropy's fused_linear_cross_entropy_loss: the cross entropy of the
    logits x·weightᵀ + bias (x [N, H], weight [V, H]) against target [N], in float32, averaged over the
    targets that are not ignore_index (at least one) or summed; with use_l2warp fla's L2Wrap gradient on each
    row's largest logit (l2_penalty_factor / N). num_chunks and accumulate_grad_in_fp32 are fla's memory and
    accumulation choices: the gradients here are autograd's, accumulated in float32 or wider."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction: expected 'mean' or 'sum', got {reduction!r}")
    _single_process(process_group)
    logits = F.linear(_float(x), _float(weight), None if bias is None else _float(bias))
    loss, _ = fla_cross_entropy_loss(logits, target, label_smoothing, logit_scale, 0.0, logit_softcapping,
                                     ignore_index)
    loss = loss.sum()
    if reduction == "mean":
        loss = loss / target.ne(ignore_index).sum().clamp_min(1)
    if use_l2warp:
        from fla.modules.l2warp import l2_warp  # fla's own torch Function: the penalty's gradient, as fla's
        loss = l2_warp(loss, logits.unsqueeze(0), l2_penalty_factor)
    return loss


# ------------------------------------------------------------------------------------------------
# A norm followed by a linear map (HGRN2's output: rms_norm_linear, which calls layer_norm_linear).


def fla_layer_norm_linear(x, norm_weight, norm_bias, linear_weight, linear_bias, residual=None, eps=1e-5,
                          prenorm=False, residual_in_fp32=False, is_rms_norm=False, num_groups=1):
    """fla.modules.norm.layernorm's layer_norm_linear: group_norm's normalisation of x (+ residual; in float32,
    returned in x's dtype), then ·linear_weightᵀ + linear_bias in that dtype; with prenorm also the residual
    stream, as group_norm returns it."""
    from .._rwkv7_layer import fla_group_norm
    normed = fla_group_norm(x, norm_weight, norm_bias, residual, eps, prenorm, residual_in_fp32, is_rms_norm,
                            num_groups)
    y = normed[0] if prenorm else normed
    out = F.linear(y, linear_weight.to(y.dtype), None if linear_bias is None else linear_bias.to(y.dtype))
    return (out, normed[1]) if prenorm else out
