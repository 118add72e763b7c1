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
    },
}
