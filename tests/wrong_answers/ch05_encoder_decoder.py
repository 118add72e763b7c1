"""Chapter 5's plausible wrong answers: each must fail every hidden test of its question."""

BACKWARD = '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased={unbiased}) + eps)
    x_hat = (x - mean) / std
    g = grad_out{gamma}
    return ({body}) / std
'''
FULL = "g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)"

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "the unbiased variance (divides by M - 1)": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * gamma + beta
''',
        "eps added to the standard deviation, not the variance": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / (x.std(dim=-1, keepdim=True, unbiased=False) + eps) * gamma + beta
''',
        "normalizes over the positions (dim=1), not the features": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=1, keepdim=True)
    var = x.var(dim=1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta
''',
    },
    "q2": {
        "the Pre-LN wiring x + f(LN(x))": '''
def post_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    return x + torch.relu(layer_norm(x, gamma, beta) @ W1 + b1) @ W2 + b2
''',
        "no residual: LN(f(x))": '''
def post_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    return layer_norm(torch.relu(x @ W1 + b1) @ W2 + b2, gamma, beta)
''',
        "ReLU after the second layer too": '''
def post_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    return layer_norm(x + torch.relu(torch.relu(x @ W1 + b1) @ W2 + b2), gamma, beta)
''',
    },
    "q3": {
        "fixes the axis only: still adds the normalized copy": '''
def pre_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    h = layer_norm(x, gamma, beta)
    return h + torch.relu(h @ W1 + b1) @ W2 + b2
''',
        "fixes the residual only: still normalizes over positions": '''
def pre_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    mean = x.mean(dim=1, keepdim=True)
    var = x.var(dim=1, keepdim=True, unbiased=False)
    h = (x - mean) / torch.sqrt(var + 1e-5) * gamma + beta
    return x + torch.relu(h @ W1 + b1) @ W2 + b2
''',
        "turns it into post-LN": '''
def pre_ln_ffn(x, gamma, beta, W1, b1, W2, b2):
    return layer_norm(x + torch.relu(x @ W1 + b1) @ W2 + b2, gamma, beta)
''',
    },
    "q4": {
        "spreads the smoothing over the V - 1 wrong tokens only": '''
def label_smoothed_loss(logits, targets, smoothing, pad_id=0):
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    others = -(log_probs.sum(dim=-1) + nll) / (logits.shape[-1] - 1)
    loss = (1 - smoothing) * nll + smoothing * others
    real = targets != pad_id
    return loss[real].sum() / real.sum()
''',
        "averages over every target, padding included": '''
def label_smoothed_loss(logits, targets, smoothing, pad_id=0):
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    loss = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return loss.mean()
''',
        "the uniform term summed over the V tokens, not averaged": '''
def label_smoothed_loss(logits, targets, smoothing, pad_id=0):
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    loss = (1 - smoothing) * nll + smoothing * -log_probs.sum(dim=-1)
    real = targets != pad_id
    return loss[real].sum() / real.sum()
''',
    },
    "q5": {
        "treats the mean and the variance as constants": BACKWARD.format(unbiased=False, gamma=" * gamma", body="g"),
        "removes the gradient's mean but not its part along x_hat": BACKWARD.format(
            unbiased=False, gamma=" * gamma", body="g - g.mean(-1, keepdim=True)"),
        "forgets gamma": BACKWARD.format(unbiased=False, gamma="", body=FULL),
        "the unbiased variance": BACKWARD.format(unbiased=True, gamma=" * gamma", body=FULL),
        # what the question forbids (review of issue 66, point 5): each gave the exact gradient
        "autograd by hand: F.layer_norm's grad_fn called on grad_out": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    y = torch.nn.functional.layer_norm(x.clone().requires_grad_(), x.shape[-1:], gamma, None, eps)
    return y.grad_fn(grad_out)[0]
''',
        "the library's backward op: torch.ops.aten.native_layer_norm_backward": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    shape = list(x.shape[-1:])
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, shape, gamma, None, eps)
    return torch.ops.aten.native_layer_norm_backward(grad_out, x, shape, mean, rstd, gamma, None,
                                                     [True, False, False])[0]
''',
        "forward-mode autograd: torch.func.jacfwd of F.layer_norm": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    rows, grads = x.reshape(-1, x.shape[-1]), grad_out.reshape(-1, x.shape[-1])
    norm = lambda row: torch.nn.functional.layer_norm(row, row.shape, gamma, None, eps)
    return torch.stack([torch.func.jacfwd(norm)(r).T @ g for r, g in zip(rows, grads)]).reshape(x.shape)
''',
        "no derivation: central finite differences in float64": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    def norm(z):  # (..., M) -> (..., M): question 1's LayerNorm times gamma
        mean = z.mean(-1, keepdim=True)
        return (z - mean) / torch.sqrt(((z - mean) ** 2).mean(-1, keepdim=True) + eps) * gamma
    h = 1e-6 * x.abs().amax(-1, keepdim=True).clamp(min=1.0)[..., None]  # (..., 1, 1)
    step = torch.eye(x.shape[-1], dtype=x.dtype) * h  # (..., M, M): row j moves x_j
    dy = (norm(x[..., None, :] + step) - norm(x[..., None, :] - step)) / (2 * h)  # (..., j, M)
    return (dy * grad_out[..., None, :]).sum(-1)
''',
        "no derivation: the complex-step derivative, exact to rounding": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    def norm(z):  # question 1's LayerNorm times gamma, written so that it accepts complex z
        mean = z.mean(-1, keepdim=True)
        return (z - mean) / torch.sqrt(((z - mean) ** 2).mean(-1, keepdim=True) + eps) * gamma
    h = 1e-30
    z = x[..., None, :].to(torch.complex128) + 1j * h * torch.eye(x.shape[-1], dtype=torch.complex128)
    return (norm(z).imag / h * grad_out[..., None, :]).sum(-1)  # (..., j, M) -> (..., j)
''',
    },
}

RIGHT_ANSWERS: dict[str, dict[str, str]] = {  # correct by another route: they earn every point
    "q5": {
        "the chain rule staged through the variance and the mean": '''
def layer_norm_backward(x, gamma, grad_out, eps=1e-5):
    m = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    inv = 1.0 / torch.sqrt(var + eps)  # (..., 1)
    dx_hat = grad_out * gamma  # (..., M)
    dvar = (dx_hat * (x - mu)).sum(-1, keepdim=True) * -0.5 * inv ** 3
    dmu = -(dx_hat * inv).sum(-1, keepdim=True) - 2.0 * dvar * (x - mu).mean(-1, keepdim=True)
    return dx_hat * inv + dvar * 2.0 * (x - mu) / m + dmu / m
''',
    },
}
